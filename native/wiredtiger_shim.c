/* A flat C face over WiredTiger's API for kvmeter's wiredtiger adapter (src/store/wiredtiger.rs).
 *
 * WiredTiger's API is structs of function pointers with variadic set_key/get_value; calling
 * those through the real header, compiled by the C compiler, keeps the struct layout and the
 * calling convention right for whatever libwiredtiger the build finds, instead of restating
 * the layout in Rust. Keys and values are raw bytes (key_format=u, value_format=u). */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <wiredtiger.h>

const char *kvm_wt_version(int *maj, int *min, int *patch) { return wiredtiger_version(maj, min, patch); }
const char *kvm_wt_strerror(int e) { return wiredtiger_strerror(e); }
int kvm_wt_notfound(void) { return WT_NOTFOUND; }

int kvm_wt_open(const char *home, const char *config, WT_CONNECTION **conn) {
    return wiredtiger_open(home, NULL, config, conn);
}

int kvm_wt_close(WT_CONNECTION *conn, const char *config) { return conn->close(conn, config); }

/* Creates the table if needed (create is idempotent for an identical config). */
int kvm_wt_create(WT_CONNECTION *conn, const char *uri, const char *config) {
    WT_SESSION *s;
    int r = conn->open_session(conn, NULL, NULL, &s);
    if (r != 0) return r;
    r = s->create(s, uri, config);
    int c = s->close(s, NULL);
    return r != 0 ? r : c;
}

int kvm_wt_checkpoint(WT_CONNECTION *conn) {
    WT_SESSION *s;
    int r = conn->open_session(conn, NULL, NULL, &s);
    if (r != 0) return r;
    r = s->checkpoint(s, NULL);
    int c = s->close(s, NULL);
    return r != 0 ? r : c;
}

/* A session with two cursors on the table: one for point operations, one for scans. */
int kvm_wt_session(WT_CONNECTION *conn, const char *uri, WT_SESSION **sp, WT_CURSOR **point,
                   WT_CURSOR **scan) {
    int r = conn->open_session(conn, NULL, NULL, sp);
    if (r != 0) return r;
    r = (*sp)->open_cursor(*sp, uri, NULL, "overwrite=true", point);
    if (r != 0) return r;
    return (*sp)->open_cursor(*sp, uri, NULL, NULL, scan);
}

int kvm_wt_session_close(WT_SESSION *s) { return s->close(s, NULL); }

int kvm_wt_reset(WT_CURSOR *c) { return c->reset(c); }

/* Point read. The value stays valid until the cursor is reset or moved. */
int kvm_wt_get(WT_CURSOR *c, const void *key, size_t klen, const void **val, size_t *vlen) {
    WT_ITEM k, v;
    memset(&k, 0, sizeof k);
    k.data = key;
    k.size = klen;
    c->set_key(c, &k);
    int r = c->search(c);
    if (r != 0) return r;
    r = c->get_value(c, &v);
    if (r != 0) return r;
    *val = v.data;
    *vlen = v.size;
    return 0;
}

int kvm_wt_put(WT_CURSOR *c, const void *key, size_t klen, const void *val, size_t vlen) {
    WT_ITEM k, v;
    memset(&k, 0, sizeof k);
    memset(&v, 0, sizeof v);
    k.data = key;
    k.size = klen;
    v.data = val;
    v.size = vlen;
    c->set_key(c, &k);
    c->set_value(c, &v);
    int r = c->insert(c);
    int z = c->reset(c);
    return r != 0 ? r : z;
}

/* With overwrite=true, removing a missing key succeeds (YCSB's delete does the same). */
int kvm_wt_del(WT_CURSOR *c, const void *key, size_t klen) {
    WT_ITEM k;
    memset(&k, 0, sizeof k);
    k.data = key;
    k.size = klen;
    c->set_key(c, &k);
    int r = c->remove(c);
    int z = c->reset(c);
    return r != 0 ? r : z;
}

/* Positions the cursor on the first key >= key; WT_NOTFOUND when there is none. */
int kvm_wt_seek(WT_CURSOR *c, const void *key, size_t klen) {
    WT_ITEM k;
    int exact = 0;
    memset(&k, 0, sizeof k);
    k.data = key;
    k.size = klen;
    c->set_key(c, &k);
    int r = c->search_near(c, &exact);
    if (r != 0) return r;
    if (exact < 0) return c->next(c);
    return 0;
}

int kvm_wt_next(WT_CURSOR *c) { return c->next(c); }

int kvm_wt_current(WT_CURSOR *c, const void **key, size_t *klen, const void **val, size_t *vlen) {
    WT_ITEM k, v;
    int r = c->get_key(c, &k);
    if (r != 0) return r;
    r = c->get_value(c, &v);
    if (r != 0) return r;
    *key = k.data;
    *klen = k.size;
    *val = v.data;
    *vlen = v.size;
    return 0;
}

/* The connection statistics kvmeter samples, in the order of STATS in src/store/wiredtiger.rs:
 * named here by the header's own constants, whose numbers change between releases. */
static const int KVM_WT_STATS[] = {
    WT_STAT_CONN_CACHE_EVICTION_CLEAN,
    WT_STAT_CONN_CACHE_EVICTION_DIRTY,
    WT_STAT_CONN_CACHE_READ,
    WT_STAT_CONN_CACHE_WRITE,
    WT_STAT_CONN_BLOCK_BYTE_WRITE,
    WT_STAT_CONN_BLOCK_BYTE_READ,
    WT_STAT_CONN_LOG_BYTES_WRITTEN,
    WT_STAT_CONN_LOG_SYNC,
    WT_STAT_CONN_TXN_CHECKPOINT,
    WT_STAT_CONN_CACHE_BYTES_INUSE,
    WT_STAT_CONN_CACHE_BYTES_DIRTY,
    WT_STAT_CONN_CACHE_BYTES_MAX,
    WT_STAT_CONN_TXN_CHECKPOINT_RUNNING,
};

int kvm_wt_stats_count(void) { return (int)(sizeof KVM_WT_STATS / sizeof KVM_WT_STATS[0]); }

/* Reads each statistic above into vals[i] (ok[i] = 0 where WiredTiger has none) from a
 * statistics cursor on a session of its own; n must be kvm_wt_stats_count(). */
int kvm_wt_stats(WT_CONNECTION *conn, int64_t *vals, int *ok, int n) {
    WT_SESSION *s;
    WT_CURSOR *c;
    if (n != kvm_wt_stats_count()) return EINVAL;
    int r = conn->open_session(conn, NULL, NULL, &s);
    if (r != 0) return r;
    r = s->open_cursor(s, "statistics:", NULL, NULL, &c);
    if (r != 0) {
        s->close(s, NULL);
        return r;
    }
    for (int i = 0; i < n; i++) {
        const char *desc, *pvalue;
        int64_t v = 0;
        c->set_key(c, KVM_WT_STATS[i]);
        ok[i] = c->search(c) == 0 && c->get_value(c, &desc, &pvalue, &v) == 0;
        vals[i] = v;
    }
    c->close(c);
    return s->close(s, NULL);
}
