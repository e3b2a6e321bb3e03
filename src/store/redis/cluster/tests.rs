//! The Redis Cluster client's tests: slot ranges against the cluster specification, the
//! slot map's bounds, redirects and lazily connected nodes.

use super::*;

#[test]
fn member_ports_leave_room_for_their_cluster_bus() {
    let ports = cluster_ports(12).unwrap();
    assert_eq!(ports.len(), 12);
    for p in &ports {
        // Redis refuses a cluster member above 55535 (its bus is port + 10000).
        assert!(*p <= 55_535, "{p}");
    }
    let mut d = ports.clone();
    d.sort_unstable();
    d.dedup();
    assert_eq!(d.len(), 12);
}

#[test]
fn slots_match_the_cluster_specification() {
    // The specification's test vector: CRC16("123456789") = 0x31C3.
    assert_eq!(crc16(b"123456789"), 0x31C3);
    // Hash tags: only the part between the first { and the next } counts.
    assert_eq!(slot(b"{user1000}.following"), slot(b"user1000"));
    assert_eq!(slot(b"foo{}{bar}"), crc16(b"foo{}{bar}") as usize % SLOTS);
    assert_eq!(slot(b"foo{{bar}}zap"), crc16(b"{bar") as usize % SLOTS);
    // Redis's own answer for CLUSTER KEYSLOT foo is 12182.
    assert_eq!(slot(b"foo"), 12182);
    // Ranges cover every slot once; shards follow them.
    for m in [3, 4, 6, 7] {
        assert_eq!(range_start(m, m), SLOTS);
        for i in 0..m {
            assert_eq!(shard_of(range_start(i, m), m), i as u16);
            assert_eq!(shard_of(range_start(i + 1, m) - 1, m), i as u16);
        }
    }
}

#[test]
fn redirects_name_their_node() {
    let r = |m: &str| super::super::RedisSession::redirect_of(m);
    let a: std::net::SocketAddr = "127.0.0.1:6381".parse().unwrap();
    assert_eq!(r("Redis: MOVED 3999 127.0.0.1:6381"), Some((a, false)));
    assert_eq!(r("Redis: ASK 3999 127.0.0.1:6381"), Some((a, true)));
    assert_eq!(r("Redis: ERR wrong number of arguments"), None);
    assert_eq!(r("Redis: CLUSTERDOWN The cluster is down"), None);
    // A host name a server sends is never looked up (the engine's rule too).
    assert_eq!(r("Redis: MOVED 3999 localhost:6381"), None);
}

/// A CLUSTER SLOTS reply: each entry (first slot, last slot, host, port), with a node id
/// and Redis 7's metadata map after host and port.
fn slots_reply(entries: &[(usize, usize, &str, u16)]) -> Vec<u8> {
    let mut r = format!("*{}\r\n", entries.len()).into_bytes();
    for (lo, hi, host, port) in entries {
        r.extend(
            format!(
                "*3\r\n:{lo}\r\n:{hi}\r\n*4\r\n${}\r\n{host}\r\n:{port}\r\n$2\r\nid\r\n*2\r\n$8\r\nhostname\r\n$1\r\nx\r\n",
                host.len()
            )
            .into_bytes(),
        );
    }
    r
}

fn asking(reply: Vec<u8>) -> net::Conn {
    let addr = net::tests::serve(vec![reply], Duration::ZERO);
    net::Conn::connect(addr, Duration::from_secs(5)).unwrap()
}

#[test]
fn a_slot_map_names_at_most_1000_nodes() {
    let node = |i: usize| (i, i, "127.0.0.2", 20000 + i as u16);
    let e = slot_map(&mut asking(slots_reply(
        &(0..1001).map(node).collect::<Vec<_>>(),
    )))
    .unwrap_err();
    assert!(e.contains("more than 1000 nodes"), "{e}");
    let map = slot_map(&mut asking(slots_reply(
        &(0..1000).map(node).collect::<Vec<_>>(),
    )))
    .unwrap();
    assert_eq!(map[999], Some("127.0.0.2:20999".parse().unwrap()));
    assert_eq!(map[1000], None);
    let e = slot_map(&mut asking(b"*16385\r\n".to_vec())).unwrap_err();
    assert!(e.contains("more than the 16384 slots"), "{e}");
    // A port that is not one names no owner.
    let map = slot_map(&mut asking(slots_reply(&[(0, 5, "127.0.0.2", 0)]))).unwrap();
    assert!(map.iter().all(Option::is_none));
}

#[test]
fn unmapped_slots_go_to_the_node_asked_and_nodes_connect_lazily() {
    // Slots 0-99 at another host, 100-199 at an empty host (the node asked, another
    // port), the rest unmapped.
    let reply = slots_reply(&[(0, 99, "127.0.0.2", 7001), (100, 199, "", 7002)]);
    let asked = net::tests::serve(vec![reply], Duration::ZERO);
    let o = StoreOptions::parse(
        "redis",
        super::super::OPTIONS,
        &[format!("addr={asked}"), "cluster=3".into()],
    )
    .unwrap();
    let s = settings(&o).unwrap();
    let mut conns = vec![net::Conn::unconnected(asked, s.timeout)];
    let mut r = Routes::default();
    r.refresh(&s, &mut conns).unwrap();
    let other: SocketAddr = "127.0.0.2:7001".parse().unwrap();
    let same_host = SocketAddr::new(asked.ip(), 7002);
    assert_eq!(r.nodes, vec![other, same_host, asked]);
    assert_eq!(r.nodes[r.slots[0] as usize], other);
    assert_eq!(r.nodes[r.slots[150] as usize], same_host);
    assert_eq!(r.nodes[r.slots[16383] as usize], asked);
    // No node was connected to: each opens when a key is first routed there.
    assert_eq!(conns.len(), 3);
    assert!(conns.iter().all(|c| c.broken && c.buffer().is_empty()));
}
