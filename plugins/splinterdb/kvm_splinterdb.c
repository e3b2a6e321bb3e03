/*
 * kvm_splinterdb.c — SplinterDB (vmware/splinterdb, papers/001) as a kvmeter store plug-in,
 * over SplinterDB's public API (include/splinterdb/splinterdb.h) only.
 *
 * Build with plugins/splinterdb/build.sh SOURCE_DIR (docs/plugins.md): it builds SplinterDB's
 * shared library from the checkout you give it and this file against it.
 *
 * A record is kvmeter's encoded record, stored as SplinterDB's value. Reads lend the value out
 * of the session's lookup result (valid until the session's next lookup); updates arrive as
 * the whole merged record (no KVM_CAP_PARTIAL_UPDATE: SplinterDB's update is a blind delta
 * whose merge the data_config would have to define) and are inserts that overwrite.
 * SplinterDB registers a thread on its first call, so a session may move to a worker thread.
 *
 * Statistics (include/kvmeter_store.h, "Statistics"): SplinterDB's API returns none of its
 * own (splinterdb_stats_print_insertion only prints tables into its log), so this plug-in
 * reports what it can know from outside: the key and record bytes it passed to SplinterDB and
 * got back (the base of kvmeter's write and read amplification, as RocksDB's
 * user_bytes_written/read are), and the bytes SplinterDB's file takes on disk. Each session
 * counts its own bytes (one writer: a relaxed store, no lock and no shared line on the hot
 * path); the sampler sums the open sessions under the store's lock, taken only at session
 * open and close and by the sampler.
 */
#define _GNU_SOURCE /* O_DIRECT */
#include "kvmeter_store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/stat.h>

#include "splinterdb/default_data_config.h"
#include "splinterdb/splinterdb.h"

struct kvm_store {
   splinterdb       *kvs;
   data_config       data_cfg;
   splinterdb_config cfg;
   char              path[4096];
   /* The open sessions (for the statistics), and the bytes of those already closed. */
   pthread_mutex_t     lock;
   struct kvm_session *sessions;
   uint64_t            closed_written, closed_read;
};

struct kvm_session {
   kvm_store               *store;
   splinterdb_lookup_result result;
   char                     error[256];
   struct kvm_session      *prev, *next;
   _Atomic uint64_t         written, read; /* key and record bytes, this session's own */
};

/* Adds n to a counter only its session's thread writes. */
static inline void
count_bytes(_Atomic uint64_t *c, uint64_t n)
{
   atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + n,
                         memory_order_relaxed);
}

static const kvm_option options[] = {
   {"cache_mb", "1024", "SplinterDB's page cache, in MiB"},
   {"disk_size_gb", "32", "size of the database file SplinterDB manages, in GiB (fixed at creation)"},
   {"direct_io", "false", "true: open the file with O_DIRECT (the page cache is bypassed)"},
   {"use_log", "false", "true: SplinterDB's write-ahead log (durability of recent writes)"},
   {"memtable_mb", "24", "memtable capacity, in MiB (SplinterDB's default: 24)"},
   {NULL, NULL, NULL},
};

/* Options into a SplinterDB config; one line in err on a bad value. */
static int
configure(const kvm_options *o, splinterdb_config *cfg, char *err, size_t err_len)
{
   uint64_t cache, disk, memtable;
   int      direct, log;
   if (kvm_option_u64(o, "cache_mb", 1, &cache, err, err_len) != 0
       || kvm_option_u64(o, "disk_size_gb", 1, &disk, err, err_len) != 0
       || kvm_option_u64(o, "memtable_mb", 1, &memtable, err, err_len) != 0
       || kvm_option_bool(o, "direct_io", &direct, err, err_len) != 0
       || kvm_option_bool(o, "use_log", &log, err, err_len) != 0) {
      return -1;
   }
   memset(cfg, 0, sizeof *cfg);
   cfg->cache_size        = cache << 20;
   cfg->disk_size         = disk << 30;
   cfg->memtable_capacity = memtable << 20;
   cfg->use_log           = log;
   cfg->io_flags          = O_RDWR | O_CREAT | (direct ? O_DIRECT : 0);
   return 0;
}

static int
check(const kvm_options *o, char *err, size_t err_len)
{
   splinterdb_config cfg;
   return configure(o, &cfg, err, err_len);
}

static kvm_store *
open_store(const char *dir, const kvm_options *o, char *err, size_t err_len)
{
   kvm_store *st = calloc(1, sizeof *st);
   if (st == NULL) {
      snprintf(err, err_len, "out of memory");
      return NULL;
   }
   if (configure(o, &st->cfg, err, err_len) != 0) {
      free(st);
      return NULL;
   }
   pthread_mutex_init(&st->lock, NULL);
   snprintf(st->path, sizeof st->path, "%s/splinterdb.db", dir);
   default_data_config_init(&st->data_cfg);
   st->cfg.filename = st->path;
   st->cfg.data_cfg = &st->data_cfg;
   /* An existing database (a run phase after a load, a reopen) is opened, else created. */
   FILE *exists = fopen(st->path, "r");
   int   rc;
   if (exists != NULL) {
      fclose(exists);
      rc = splinterdb_open(&st->cfg, &st->kvs);
   } else {
      rc = splinterdb_create(&st->cfg, &st->kvs);
   }
   if (rc != 0) {
      snprintf(err, err_len, "SplinterDB %s %s: %s (error %d)",
               exists != NULL ? "open" : "create", st->path, strerror(rc), rc);
      free(st);
      return NULL;
   }
   return st;
}

static int
close_store(kvm_store *st, char *err, size_t err_len)
{
   (void)err, (void)err_len;
   splinterdb_close(&st->kvs);
   pthread_mutex_destroy(&st->lock);
   free(st);
   return KVM_OK;
}

static kvm_session *
session_open(kvm_store *st, char *err, size_t err_len)
{
   kvm_session *s = calloc(1, sizeof *s);
   if (s == NULL) {
      snprintf(err, err_len, "out of memory");
      return NULL;
   }
   s->store = st;
   /* No buffer of ours: the result grows its own and keeps it across lookups. */
   splinterdb_lookup_result_init(st->kvs, &s->result, SPLINTERDB_LOOKUP_VALUE, 0, NULL);
   pthread_mutex_lock(&st->lock);
   s->next = st->sessions;
   if (st->sessions != NULL) {
      st->sessions->prev = s;
   }
   st->sessions = s;
   pthread_mutex_unlock(&st->lock);
   return s;
}

static int
session_close(kvm_session *s)
{
   kvm_store *st = s->store;
   pthread_mutex_lock(&st->lock);
   st->closed_written += atomic_load_explicit(&s->written, memory_order_relaxed);
   st->closed_read += atomic_load_explicit(&s->read, memory_order_relaxed);
   if (s->prev != NULL) {
      s->prev->next = s->next;
   } else {
      st->sessions = s->next;
   }
   if (s->next != NULL) {
      s->next->prev = s->prev;
   }
   pthread_mutex_unlock(&st->lock);
   splinterdb_lookup_result_deinit(&s->result);
   free(s);
   return KVM_OK;
}

static int
fail(kvm_session *s, const char *what, int rc)
{
   snprintf(s->error, sizeof s->error, "SplinterDB %s: %s (error %d)", what, strerror(rc), rc);
   return rc == ENOSPC || rc == EIO ? (KVM_ERROR_IO | KVM_FATAL) : KVM_ERROR;
}

static int
read_record(kvm_session   *s,
            const char    *table,
            const uint8_t *key,
            size_t         key_len,
            const uint8_t **record,
            size_t         *record_len)
{
   (void)table;
   int rc = splinterdb_lookup(s->store->kvs, slice_create(key_len, key), &s->result);
   if (rc != 0) {
      return fail(s, "lookup", rc);
   }
   if (!splinterdb_lookup_found(&s->result)) {
      return KVM_NOT_FOUND;
   }
   slice value;
   if ((rc = splinterdb_lookup_result_value(&s->result, &value)) != 0) {
      return fail(s, "lookup value", rc);
   }
   *record     = slice_data(value); /* lent until this session's next lookup */
   *record_len = slice_length(value);
   count_bytes(&s->read, key_len + slice_length(value));
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
   splinterdb_iterator *it;
   int                  rc = splinterdb_iterator_init(
      s->store->kvs, &it, greater_than_or_equal, slice_create(start_len, start));
   if (rc != 0) {
      return fail(s, "iterator", rc);
   }
   int status = KVM_OK;
   for (size_t i = 0; i < count && splinterdb_iterator_valid(it); i++) {
      slice k, v;
      splinterdb_iterator_get_current(it, &k, &v);
      count_bytes(&s->read, slice_length(k) + slice_length(v));
      if (emit(ctx, slice_data(k), slice_length(k), slice_data(v), slice_length(v)) != 0) {
         status = KVM_ERROR_CORRUPTION;
         break;
      }
      splinterdb_iterator_next(it);
   }
   if (status == KVM_OK && (rc = splinterdb_iterator_status(it)) != 0) {
      status = fail(s, "scan", rc);
   }
   splinterdb_iterator_deinit(it);
   return status;
}

static int
put(kvm_session *s, const uint8_t *key, size_t key_len, const uint8_t *rec, size_t rec_len)
{
   int rc = splinterdb_insert(
      s->store->kvs, slice_create(key_len, key), slice_create(rec_len, rec), NULL);
   if (rc != 0) {
      return fail(s, "insert", rc);
   }
   count_bytes(&s->written, key_len + rec_len);
   return KVM_OK;
}

/* No update: kvmeter merges the updated fields into the stored record and writes the result
 * with insert (include/kvmeter_store.h). */
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

static int
remove_key(kvm_session *s, const char *table, const uint8_t *key, size_t key_len)
{
   (void)table;
   int rc = splinterdb_delete(s->store->kvs, slice_create(key_len, key), NULL);
   return rc == 0 ? KVM_OK : fail(s, "delete", rc);
}

static const char *
last_error(kvm_session *s)
{
   return s->error[0] != '\0' ? s->error : NULL;
}

/* --- statistics ------------------------------------------------------------------------- */

static const kvm_stat stats[] = {
   {"user_bytes_written", "bytes", KVM_STAT_COUNTER, KVM_ROLE_USER_WRITE,
    "key and record bytes of the inserts SplinterDB accepted (counted by the plug-in)"},
   {"user_bytes_read", "bytes", KVM_STAT_COUNTER, KVM_ROLE_USER_READ,
    "key and record bytes SplinterDB's lookups and scans returned (counted by the plug-in)"},
   {"file_bytes", "bytes", KVM_STAT_GAUGE, KVM_ROLE_PLAIN,
    "bytes SplinterDB's database file takes on disk (allocated blocks; the file is sparse)"},
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
   pthread_mutex_lock(&st->lock);
   uint64_t written = st->closed_written, read = st->closed_read;
   for (kvm_session *s = st->sessions; s != NULL; s = s->next) {
      written += atomic_load_explicit(&s->written, memory_order_relaxed);
      read += atomic_load_explicit(&s->read, memory_order_relaxed);
   }
   pthread_mutex_unlock(&st->lock);
   emit(ctx, "user_bytes_written", written);
   emit(ctx, "user_bytes_read", read);
   /* A file that cannot be looked at leaves file_bytes unavailable in this sample only. */
   (void)err, (void)err_len;
   struct stat sb;
   if (stat(st->path, &sb) == 0) {
      emit(ctx, "file_bytes", (uint64_t)sb.st_blocks * 512);
   }
   return 0;
}

static char version[128];

const kvm_plugin *
kvmeter_store_plugin(void)
{
   static kvm_plugin plugin = {
      .abi_version   = KVMETER_STORE_ABI_VERSION,
      .capabilities  = KVM_CAP_SCAN | KVM_CAP_PERSISTENT | KVM_CAP_STORES_DATA,
      .name          = "splinterdb",
      .summary       = "SplinterDB (VMware), size-tiered B^epsilon-tree store built from source",
      .options       = options,
      .check         = check,
      .open          = open_store,
      .close         = close_store,
      .session_open  = session_open,
      .session_close = session_close,
      .read          = read_record,
      .scan          = scan,
      .update        = NULL,
      .insert        = insert,
      .remove        = remove_key,
      .last_error    = last_error,
   };
   /* "splinterdb_build_version <git description>" → the description. */
   const char *v      = splinterdb_get_version();
   const char *prefix = "splinterdb_build_version ";
   if (strncmp(v, prefix, strlen(prefix)) == 0) {
      v += strlen(prefix);
   }
   snprintf(version, sizeof version, "%s", v);
   plugin.version = version;
   return &plugin;
}
