/*
 * kvm_lmdb.c — an example kvmeter store plug-in: LMDB through Debian's liblmdb, written the way
 * kvmeter's built-in `lmdb` adapter is (src/store/lmdb.rs), so the two measure the same store
 * with the same calls and any difference is the plug-in boundary (BENCHMARKS.md).
 *
 * Build (Debian: apt-get install liblmdb-dev):
 *     cc -O2 -fPIC -shared -I include examples/plugins/kvm_lmdb.c -llmdb -o libkvm_lmdb.so
 * or `make -C examples/plugins`. Run:
 *     kvmeter stores plugin:./libkvm_lmdb.so
 *     kvmeter suite --store plugin:./libkvm_lmdb.so --store-opt sync=nosync
 *
 * What a plug-in needs (include/kvmeter_store.h):
 *   - one exported function, kvmeter_store_plugin(), returning a static kvm_plugin table;
 *   - open/close for the store, session_open/session_close for each worker;
 *   - read (lending the stored bytes), scan, insert, remove over kvmeter's encoded records,
 *     which a byte store keeps as they come (update may be NULL: kvmeter merges and inserts);
 *   - status codes, and last_error for the text of the latest error;
 *   - optionally, the store's own statistics (kvmeter_store_stats_declared/kvmeter_store_stats).
 * LMDB keeps a value in its memory map, so read lends it without a copy: the pointer stays
 * valid until the session's next call, when the read transaction is reset.
 */
#include "kvmeter_store.h"

#include <errno.h>
#include <lmdb.h>
#include <stdlib.h>

struct kvm_store {
   MDB_env *env;
   MDB_dbi  dbi;
};

struct kvm_session {
   struct kvm_store *store;
   MDB_txn          *read;   /* one read transaction per session, reset and renewed */
   MDB_cursor       *cursor; /* the scan cursor, renewed with the read transaction */
   int               active; /* the read transaction is live (must be reset before a write) */
   char              error[256];
};

static const kvm_option options[] = {
   {"map_size_mb", "16384", "largest size the database may grow to, in MiB (sparse)"},
   {"sync", "full", "full (fsync at commit), nometasync or nosync"},
   {"max_readers", "1024", "reader slots (one per session)"},
   {NULL, NULL, NULL},
};

/* --- options ------------------------------------------------------------------------------- */

struct settings {
   size_t       map_bytes;
   unsigned int flags;
   unsigned int max_readers;
};

static int
settings_of(const kvm_options *o, struct settings *s, char *err, size_t err_len)
{
   uint64_t    mb, readers;
   const char *sync = kvm_option_value(o, "sync");
   if (kvm_option_u64(o, "map_size_mb", 1, &mb, err, err_len) != 0
       || kvm_option_u64(o, "max_readers", 1, &readers, err, err_len) != 0) {
      return -1;
   }
   if (readers > (1u << 20)) {
      snprintf(err, err_len, "max_readers=%llu: expected at most 1048576", (unsigned long long)readers);
      return -1;
   }
   s->flags = MDB_NOTLS | MDB_NORDAHEAD;
   if (strcmp(sync, "nometasync") == 0) {
      s->flags |= MDB_NOMETASYNC;
   } else if (strcmp(sync, "nosync") == 0) {
      s->flags |= MDB_NOSYNC;
   } else if (strcmp(sync, "full") != 0) {
      snprintf(err, err_len, "sync=%s: expected full, nometasync or nosync", sync);
      return -1;
   }
   s->map_bytes   = (size_t)mb << 20;
   s->max_readers = (unsigned int)readers;
   return 0;
}

static int
check(const kvm_options *o, char *err, size_t err_len)
{
   struct settings s;
   return settings_of(o, &s, err, err_len);
}

/* --- store --------------------------------------------------------------------------------- */

static kvm_store *
open_store(const char *dir, const kvm_options *o, char *err, size_t err_len)
{
   struct settings s;
   if (settings_of(o, &s, err, err_len) != 0) {
      return NULL;
   }
   kvm_store *st = calloc(1, sizeof *st);
   MDB_txn   *txn;
   int        rc;
   if (st == NULL) {
      snprintf(err, err_len, "out of memory");
      return NULL;
   }
   if ((rc = mdb_env_create(&st->env)) != 0) {
      goto fail;
   }
   mdb_env_set_mapsize(st->env, s.map_bytes);
   mdb_env_set_maxreaders(st->env, s.max_readers);
   if ((rc = mdb_env_open(st->env, dir, s.flags, 0644)) != 0
       || (rc = mdb_txn_begin(st->env, NULL, 0, &txn)) != 0) {
      goto fail;
   }
   if ((rc = mdb_dbi_open(txn, NULL, MDB_CREATE, &st->dbi)) != 0) {
      mdb_txn_abort(txn);
      goto fail;
   }
   if ((rc = mdb_txn_commit(txn)) != 0) {
      goto fail;
   }
   return st;
fail:
   snprintf(err, err_len, "LMDB at %s: %s", dir, mdb_strerror(rc));
   if (st->env != NULL) {
      mdb_env_close(st->env);
   }
   free(st);
   return NULL;
}

static int
close_store(kvm_store *st, char *err, size_t err_len)
{
   int rc = mdb_env_sync(st->env, 1); /* nosync data becomes durable at close */
   mdb_env_close(st->env);
   free(st);
   if (rc != 0) {
      snprintf(err, err_len, "LMDB sync at close: %s", mdb_strerror(rc));
      return KVM_ERROR_IO;
   }
   return KVM_OK;
}

/* --- sessions ------------------------------------------------------------------------------ */

static kvm_session *
session_open(kvm_store *st, char *err, size_t err_len)
{
   kvm_session *s = calloc(1, sizeof *s);
   if (s == NULL) {
      snprintf(err, err_len, "out of memory");
      return NULL;
   }
   s->store = st;
   return s;
}

static int
session_close(kvm_session *s)
{
   if (s->cursor != NULL) {
      mdb_cursor_close(s->cursor);
   }
   if (s->read != NULL) {
      mdb_txn_abort(s->read);
   }
   free(s);
   return KVM_OK;
}

/* An LMDB code as a kvmeter status, with its text kept for last_error. */
static int
fail(kvm_session *s, const char *what, int rc)
{
   snprintf(s->error, sizeof s->error, "LMDB %s: %s", what, mdb_strerror(rc));
   switch (rc) {
      case MDB_MAP_FULL:
      case ENOSPC:
      case EIO:
         return KVM_ERROR_IO | KVM_FATAL;
      case MDB_CORRUPTED:
      case MDB_PANIC:
         return KVM_ERROR_CORRUPTION | KVM_FATAL;
      default:
         return KVM_ERROR;
   }
}

/* Ends what the previous call lent (the read transaction's snapshot). */
static void
release(kvm_session *s)
{
   if (s->active) {
      mdb_txn_reset(s->read);
      s->active = 0;
   }
}

static int
begin_read(kvm_session *s)
{
   release(s);
   int rc = s->read == NULL
               ? mdb_txn_begin(s->store->env, NULL, MDB_RDONLY, &s->read)
               : mdb_txn_renew(s->read);
   if (rc != 0) {
      return fail(s, "read transaction", rc);
   }
   s->active = 1;
   return KVM_OK;
}

#ifdef KVM_LMDB_BUSY_READ
/* A deliberate busy loop in the read path, KVM_LMDB_BUSY_READ iterations per read: kvmeter's
 * profile test (issue 44) builds the example with it and expects this named function to hold
 * most of a read-only phase's store samples. Never in a real plug-in. */
__attribute__((noinline)) void
kvm_lmdb_busy_read(void)
{
   volatile uint64_t sink = 0;
   for (uint64_t i = 0; i < (uint64_t)(KVM_LMDB_BUSY_READ); i++) {
      sink += i;
   }
}
#endif

static int
read_record(kvm_session   *s,
            const char    *table,
            const uint8_t *key,
            size_t         key_len,
            const uint8_t **record,
            size_t         *record_len)
{
   (void)table;
#ifdef KVM_LMDB_BUSY_READ
   kvm_lmdb_busy_read();
#endif
   int rc = begin_read(s);
   if (rc != KVM_OK) {
      return rc;
   }
   MDB_val k = {key_len, (void *)key}, v;
   rc        = mdb_get(s->read, s->store->dbi, &k, &v);
   if (rc == MDB_NOTFOUND) {
      return KVM_NOT_FOUND;
   }
   if (rc != 0) {
      return fail(s, "get", rc);
   }
   *record     = v.mv_data; /* lent from the map until this session's next call */
   *record_len = v.mv_size;
   return KVM_OK;
}

static int
scan(kvm_session   *s,
     const char    *table,
     const uint8_t *start,
     size_t         start_len,
     size_t         count,
     kvm_scan_emit  emit,
     void          *ctx)
{
   (void)table;
   int rc = begin_read(s);
   if (rc != KVM_OK) {
      return rc;
   }
   rc = s->cursor == NULL ? mdb_cursor_open(s->read, s->store->dbi, &s->cursor)
                          : mdb_cursor_renew(s->read, s->cursor);
   if (rc != 0) {
      return fail(s, "cursor", rc);
   }
   MDB_val      k = {start_len, (void *)start}, v;
   MDB_cursor_op op = MDB_SET_RANGE;
   for (size_t i = 0; i < count; i++, op = MDB_NEXT) {
      rc = mdb_cursor_get(s->cursor, &k, &v, op);
      if (rc == MDB_NOTFOUND) {
         break;
      }
      if (rc != 0) {
         return fail(s, "scan", rc);
      }
      if (emit(ctx, k.mv_data, k.mv_size, v.mv_data, v.mv_size) != 0) {
         return KVM_ERROR_CORRUPTION;
      }
   }
   return KVM_OK;
}

/* One write in its own transaction, as the built-in adapter does. */
static int
put(kvm_session *s, const uint8_t *key, size_t key_len, const uint8_t *rec, size_t rec_len)
{
   release(s);
   MDB_txn *txn;
   MDB_val  k = {key_len, (void *)key}, v = {rec_len, (void *)rec};
   int      rc = mdb_txn_begin(s->store->env, NULL, 0, &txn);
   if (rc != 0) {
      return fail(s, "write transaction", rc);
   }
   if ((rc = mdb_put(txn, s->store->dbi, &k, &v, 0)) != 0) {
      mdb_txn_abort(txn);
      return fail(s, "put", rc);
   }
   if ((rc = mdb_txn_commit(txn)) != 0) {
      return fail(s, "commit", rc);
   }
   return KVM_OK;
}

/* An insert, and an update too: without KVM_CAP_PARTIAL_UPDATE kvmeter merges the updated
 * fields into the stored record and writes the result with insert (update is NULL below). */
static int
insert(kvm_session   *s,
       const char    *table,
       const uint8_t *key,
       size_t         key_len,
       const uint8_t *rec,
       size_t         rec_len)
{
   (void)table;
   return put(s, key, key_len, rec, rec_len);
}

#ifdef KVM_LMDB_PARTIAL_UPDATE
/* Built with -DKVM_LMDB_PARTIAL_UPDATE the plug-in declares KVM_CAP_PARTIAL_UPDATE and applies
 * YCSB's update itself: the given fields replace or join the stored ones, read and written in
 * one LMDB write transaction. It shows kvm_record_next() at work; kvmeter's tests run the
 * conformance suite on this variant too. */
static int
has_field(const uint8_t *rec, size_t len, const kvm_field *f)
{
   size_t    pos = 0;
   kvm_field g;
   while (kvm_record_next(rec, len, &pos, &g) == 1) {
      if (g.name_len == f->name_len && memcmp(g.name, f->name, f->name_len) == 0) {
         return 1;
      }
   }
   return 0;
}

static size_t
append_field(uint8_t *out, const kvm_field *f)
{
   size_t n = 0;
   out[n++] = (uint8_t)(f->name_len & 0xff);
   out[n++] = (uint8_t)(f->name_len >> 8);
   memcpy(out + n, f->name, f->name_len);
   n += f->name_len;
   for (int i = 0; i < 4; i++) {
      out[n++] = (uint8_t)(f->value_len >> (8 * i));
   }
   memcpy(out + n, f->value, f->value_len);
   return n + f->value_len;
}

static int
update(kvm_session   *s,
       const char    *table,
       const uint8_t *key,
       size_t         key_len,
       const uint8_t *fields,
       size_t         fields_len)
{
   (void)table;
   release(s);
   MDB_txn *txn;
   MDB_val  k = {key_len, (void *)key}, v;
   int      rc = mdb_txn_begin(s->store->env, NULL, 0, &txn);
   if (rc != 0) {
      return fail(s, "write transaction", rc);
   }
   if ((rc = mdb_get(txn, s->store->dbi, &k, &v)) != 0) {
      mdb_txn_abort(txn);
      return rc == MDB_NOTFOUND ? KVM_NOT_FOUND : fail(s, "get", rc);
   }
   /* The merged record is at most the stored one plus the update (an example: one malloc per
    * update; a real store would keep a buffer per session). */
   uint8_t *merged = malloc(v.mv_size + fields_len);
   size_t   n = 0, pos = 0;
   kvm_field f;
   if (merged == NULL) {
      mdb_txn_abort(txn);
      snprintf(s->error, sizeof s->error, "out of memory");
      return KVM_ERROR;
   }
   while (kvm_record_next(fields, fields_len, &pos, &f) == 1) {
      n += append_field(merged + n, &f);
   }
   pos = 0;
   int more;
   while ((more = kvm_record_next(v.mv_data, v.mv_size, &pos, &f)) == 1) {
      if (!has_field(fields, fields_len, &f)) {
         n += append_field(merged + n, &f);
      }
   }
   if (more < 0) {
      free(merged);
      mdb_txn_abort(txn);
      snprintf(s->error, sizeof s->error, "stored record under the key is truncated");
      return KVM_ERROR_CORRUPTION;
   }
   MDB_val m = {n, merged};
   rc        = mdb_put(txn, s->store->dbi, &k, &m, 0);
   free(merged);
   if (rc != 0) {
      mdb_txn_abort(txn);
      return fail(s, "put", rc);
   }
   return (rc = mdb_txn_commit(txn)) == 0 ? KVM_OK : fail(s, "commit", rc);
}
#define CAPS_UPDATE KVM_CAP_PARTIAL_UPDATE
#define UPDATE      update
#else
#define CAPS_UPDATE 0
#define UPDATE      NULL
#endif

static int
remove_key(kvm_session *s, const char *table, const uint8_t *key, size_t key_len)
{
   (void)table;
   release(s);
   MDB_txn *txn;
   MDB_val  k  = {key_len, (void *)key};
   int      rc = mdb_txn_begin(s->store->env, NULL, 0, &txn);
   if (rc != 0) {
      return fail(s, "write transaction", rc);
   }
   rc = mdb_del(txn, s->store->dbi, &k, NULL);
   if (rc != 0 && rc != MDB_NOTFOUND) {
      mdb_txn_abort(txn);
      return fail(s, "delete", rc);
   }
   if ((rc = mdb_txn_commit(txn)) != 0) {
      return fail(s, "commit", rc);
   }
   return KVM_OK;
}

static const char *
last_error(kvm_session *s)
{
   return s->error[0] != '\0' ? s->error : NULL;
}

/* --- statistics (optional; include/kvmeter_store.h, "Statistics") ------------------------- */

/* LMDB's own accounting, as kvmeter's built-in adapter reads it: mdb_env_stat and
 * mdb_env_info are safe to call while other threads run transactions. Built with
 * -DKVM_LMDB_NO_STATS, the plug-in is one from before the statistics calls. */
#ifndef KVM_LMDB_NO_STATS
static const kvm_stat stats[] = {
   {"write_txns", "count", KVM_STAT_COUNTER, KVM_ROLE_WORK,
    "write transactions committed (me_last_txnid: one per write)"},
   {"entries", "count", KVM_STAT_GAUGE, KVM_ROLE_PLAIN, "records in the tree (ms_entries)"},
   {"depth", "count", KVM_STAT_GAUGE, KVM_ROLE_PLAIN, "height of the B+tree (ms_depth)"},
   {"tree_bytes", "bytes", KVM_STAT_GAUGE, KVM_ROLE_PLAIN,
    "branch, leaf and overflow pages times the page size"},
   {"map_used_bytes", "bytes", KVM_STAT_GAUGE, KVM_ROLE_PLAIN,
    "pages of the map in use, free ones included ((me_last_pgno + 1) x page size)"},
   {NULL, NULL, 0, 0, NULL},
};

const kvm_stat *
kvmeter_store_stats_declared(void)
{
   return stats;
}

int
kvmeter_store_stats(kvm_store *st, kvm_stat_emit emit, void *ctx, char *err, size_t err_len)
{
   MDB_stat    ms;
   MDB_envinfo info;
   int         rc;
   if ((rc = mdb_env_stat(st->env, &ms)) != 0 || (rc = mdb_env_info(st->env, &info)) != 0) {
      snprintf(err, err_len, "LMDB statistics: %s", mdb_strerror(rc));
      return -1;
   }
   uint64_t pages = (uint64_t)ms.ms_branch_pages + ms.ms_leaf_pages + ms.ms_overflow_pages;
   emit(ctx, "write_txns", (uint64_t)info.me_last_txnid);
   emit(ctx, "entries", (uint64_t)ms.ms_entries);
   emit(ctx, "depth", (uint64_t)ms.ms_depth);
   emit(ctx, "tree_bytes", pages * ms.ms_psize);
   emit(ctx, "map_used_bytes", ((uint64_t)info.me_last_pgno + 1) * ms.ms_psize);
   return 0;
}
#endif

/* --- the table kvmeter loads --------------------------------------------------------------- */

static char version[64];

const kvm_plugin *
kvmeter_store_plugin(void)
{
   static kvm_plugin plugin = {
      .abi_version   = KVMETER_STORE_ABI_VERSION,
      .capabilities  = KVM_CAP_SCAN | KVM_CAP_PERSISTENT | KVM_CAP_STORES_DATA | CAPS_UPDATE,
      .name          = "lmdb-example",
      .summary       = "LMDB through Debian's liblmdb: the example plug-in (examples/plugins)",
      .options       = options,
      .check         = check,
      .open          = open_store,
      .close         = close_store,
      .session_open  = session_open,
      .session_close = session_close,
      .read          = read_record,
      .scan          = scan,
      .update        = UPDATE,
      .insert        = insert,
      .remove        = remove_key,
      .last_error    = last_error,
   };
   int major, minor, patch;
   mdb_version(&major, &minor, &patch);
   snprintf(version, sizeof version, "LMDB %d.%d.%d", major, minor, patch);
   plugin.version = version;
   return &plugin;
}
