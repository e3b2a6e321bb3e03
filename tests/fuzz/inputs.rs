//! Fuzz targets over what arrives from outside during a run (issue 41): the `/metrics`
//! endpoint's request head, and trace files in each format with huge keys, values and times.

use super::engine::Target;
use super::targets::scratch;

pub fn all() -> Vec<Target> {
    vec![
        Target {
            name: "metrics_request",
            seeds: seeds_metrics,
            dict: METRICS_DICT,
            run: metrics_request,
        },
        Target {
            name: "trace",
            seeds: seeds_trace,
            dict: TRACE_DICT,
            run: trace,
        },
    ]
}

const METRICS_DICT: &[&str] = &[
    "GET ",
    "HEAD ",
    "POST ",
    "/metrics",
    "?x=1",
    " HTTP/1.1",
    " HTTP/1.0",
    "\r\n",
    "\r\n\r\n",
    "Accept: ",
    "application/vnd.google.protobuf",
    "io.prometheus.client.MetricFamily",
    ":",
    "X: y\r\n",
];

fn seeds_metrics() -> Vec<Vec<u8>> {
    vec![
        b"GET /metrics HTTP/1.1\r\nHost: a\r\n\r\n".to_vec(),
        b"GET /metrics?x=1 HTTP/1.1\r\nAccept: application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited\r\n\r\n".to_vec(),
        b"HEAD /metrics HTTP/1.0\r\n\r\n".to_vec(),
        b"POST / HTTP/1.1\r\n\r\n".to_vec(),
    ]
}

/// The head as the server bounds it (8 KiB), then parsed.
fn metrics_request(input: &[u8]) -> bool {
    let head = &input[..input.len().min(kvmeter::metrics::http::MAX_REQUEST)];
    kvmeter::metrics::http::parse(head).is_ok()
}

const TRACE_DICT: &[&str] = &[
    ",",
    "\n",
    "get",
    "set",
    "delete",
    "GET",
    "SET",
    "\"SET\"",
    " [0 127.0.0.1:6379] ",
    "18446744073709551615",
    "9999999999999",
    "-1",
    "op_time,key,key_size,op,op_count,size",
    "1700000000.123456",
    "0,k,1,10,1,get,0\n",
];

fn seeds_trace() -> Vec<Vec<u8>> {
    let huge = "k".repeat(70 * 1024);
    vec![
        b"0,k,1,10,1,get,0\n1,k2,2,20,1,set,0\n".to_vec(),
        format!("0,{huge},{},10,1,get,0\n", huge.len()).into_bytes(),
        b"18446744073709551615,k,1,10,1,get,0\n0,k,1,18446744073709551615,1,set,0\n".to_vec(),
        b"op_time,key,key_size,op,op_count,size\n1,k,1,GET,3,10\n".to_vec(),
        b"1700000000.123456 [0 127.0.0.1:6379] \"SET\" \"key\" \"value\"\n".to_vec(),
    ]
}

/// The input as a trace file, read to its end in every format: each record or error within
/// the reader's bounds.
fn trace(input: &[u8]) -> bool {
    use kvmeter::trace::{Format, TraceReader, TraceRecord};
    let path = scratch().join("trace.txt");
    if std::fs::write(&path, input).is_err() {
        return false;
    }
    let mut any = false;
    for (_, format) in Format::ALL {
        let Ok(mut r) = TraceReader::open(&path, format) else {
            continue;
        };
        let mut rec = TraceRecord::default();
        for _ in 0..100_000 {
            match r.next_into(&mut rec) {
                Ok(true) => {
                    any = true;
                    assert!(rec.key.len() <= kvmeter::trace::MAX_KEY);
                }
                Ok(false) => break,
                Err(_) => break,
            }
        }
    }
    any
}
