/*
 * kvmeter_store.h — the store plug-in ABI of kvmeter (docs/plugins.md).
 *
 * A plug-in is a shared library that exports one function,
 *
 *     const kvm_plugin *kvmeter_store_plugin(void);
 *
 * returning a table that lives as long as the library. kvmeter loads it with
 * `--store plugin:/path/libfoo.so`, checks `abi_version` against the version it was built
 * for (a mismatch is refused with one line, before anything is created), passes
 * `--store-opt key=value` through to `check` and `open`, and measures every call with the same
 * wrapper, telemetry and reports as its built-in stores: a plug-in never times itself.
 *
 * Records. kvmeter's operations follow YCSB's DB interface over records (a map of field names
 * to values). A record crosses this ABI in one flat encoding, the one kvmeter's built-in
 * embedded stores keep under a key:
 *
 *     repeated { u16 little-endian name length, name bytes, u32 little-endian value length, value bytes }
 *
 * so a byte-oriented store (LMDB, SplinterDB, ...) stores the bytes as they come and lends them
 * back on a read; kvmeter picks the asked fields out of the lent bytes without copying.
 * kvm_record_next() below walks the fields for a store that wants them one by one.
 *
 * Threads. kvmeter opens the store once per phase and one session per worker thread. A session
 * is created on the main thread and then used by exactly one worker thread at a time; a store
 * that needs per-thread registration (SplinterDB) does it on the first call from a thread.
 * Sessions of one store are used concurrently; `open`, `close` and `check` are not.
 *
 * Compatibility. KVMETER_STORE_ABI_VERSION changes whenever this table's layout or meaning
 * changes; kvmeter refuses a plug-in whose abi_version differs from its own.
 */
#ifndef KVMETER_STORE_H
#define KVMETER_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVMETER_STORE_ABI_VERSION 1u

/* Status codes, as kvmeter counts them (an error's kind is its own column in results). */
typedef enum kvm_status {
   KVM_OK                  = 0,
   KVM_NOT_FOUND           = 1, /* read/update of a key that is not there */
   KVM_ERROR               = 2, /* anything else; say what in last_error */
   KVM_ERROR_IO            = 3, /* disk full, EIO */
   KVM_ERROR_TIMEOUT       = 4,
   KVM_ERROR_BUSY          = 5, /* try again */
   KVM_ERROR_CORRUPTION    = 6,
   KVM_ERROR_NOT_SUPPORTED = 7, /* this store does not do this operation */
} kvm_status;

/* OR'ed into an error status: the store cannot go on. kvmeter ends the phase with the results
 * so far and reports the error's text. */
#define KVM_FATAL 0x100

/* Capabilities (kvm_plugin.capabilities). */
#define KVM_CAP_SCAN           (1u << 0) /* scan works (else kvmeter reports scans as N/A) */
#define KVM_CAP_PERSISTENT     (1u << 1) /* data survives close and open on the same dir */
#define KVM_CAP_STORES_DATA    (1u << 2) /* reads return what was written (0: a null store) */
/* update receives only the changed fields and applies them itself (YCSB's update: the given
 * fields replace or join the stored ones). Without it kvmeter reads, merges and calls update
 * with the whole new record, as YCSB's RocksDB binding does. */
#define KVM_CAP_PARTIAL_UPDATE (1u << 3)

/* An option the store accepts: `kvmeter stores` lists them; `--store-opt` names anything else
 * are refused by kvmeter before the plug-in sees them. */
typedef struct kvm_option {
   const char *name;
   const char *default_value;
   const char *help;
} kvm_option;

/* Option values as open/check get them: every declared option, in declaration order, with the
 * user's value or the default. */
typedef struct kvm_options {
   const char *const *names;
   const char *const *values;
   size_t             count;
} kvm_options;

/* The value of option `name`, or NULL when it is not declared. */
static inline const char *
kvm_option_value(const kvm_options *o, const char *name)
{
   for (size_t i = 0; i < o->count; i++) {
      if (strcmp(o->names[i], name) == 0) {
         return o->values[i];
      }
   }
   return NULL;
}

/* Option `name` as a whole number >= min: 0, or -1 with one line in err ("name=value:
 * expected ..."), ready to return from check(). */
static inline int
kvm_option_u64(const kvm_options *o, const char *name, uint64_t min, uint64_t *out, char *err,
               size_t err_len)
{
   const char *v = kvm_option_value(o, name);
   uint64_t    n = 0;
   const char *p = v;
   int         ok = v != NULL && *v != '\0';
   for (; ok && *p != '\0'; p++) {
      if (*p < '0' || *p > '9' || n > (UINT64_MAX - (uint64_t)(*p - '0')) / 10) {
         ok = 0;
      } else {
         n = n * 10 + (uint64_t)(*p - '0');
      }
   }
   if (!ok || n < min) {
      snprintf(err, err_len, "%s=%s: expected a whole number >= %llu", name, v != NULL ? v : "",
               (unsigned long long)min);
      return -1;
   }
   *out = n;
   return 0;
}

/* Option `name` as true or false: 0, or -1 with one line in err. */
static inline int
kvm_option_bool(const kvm_options *o, const char *name, int *out, char *err, size_t err_len)
{
   const char *v = kvm_option_value(o, name);
   if (v != NULL && strcmp(v, "true") == 0) {
      *out = 1;
   } else if (v != NULL && strcmp(v, "false") == 0) {
      *out = 0;
   } else {
      snprintf(err, err_len, "%s=%s: expected true or false", name, v != NULL ? v : "");
      return -1;
   }
   return 0;
}

typedef struct kvm_store   kvm_store;   /* the plug-in's own */
typedef struct kvm_session kvm_session; /* the plug-in's own */

/* What scan hands each record to, in key order; a non-zero return stops the scan (kvmeter
 * could not decode the record) and the scan should return KVM_ERROR_CORRUPTION. */
typedef int (*kvm_scan_emit)(void          *ctx,
                             const uint8_t *key,
                             size_t         key_len,
                             const uint8_t *record,
                             size_t         record_len);

typedef struct kvm_plugin {
   uint32_t abi_version; /* KVMETER_STORE_ABI_VERSION */
   uint32_t capabilities;
   const char *name;    /* short, [a-z0-9_-]: names the run directory and the reports */
   const char *version; /* the store's version, e.g. "splinterdb 0.0.1-d2173e0e" */
   const char *summary; /* one line for `kvmeter stores` */
   const kvm_option *options; /* terminated by an entry with name == NULL */

   /* Checks option values without creating anything (may be NULL). Returns 0, or non-zero
    * with one line in err (NUL-terminated, at most err_len bytes): kvmeter prints it and
    * exits 2. */
   int (*check)(const kvm_options *opts, char *err, size_t err_len);

   /* Opens (creating if needed) the store with its files under `dir`, a directory kvmeter
    * created and owns. NULL with a message in err on failure. */
   kvm_store *(*open)(const char *dir, const kvm_options *opts, char *err, size_t err_len);
   /* Flushes and closes; after it returns the data is durable where the store promises it. */
   int (*close)(kvm_store *store, char *err, size_t err_len);

   kvm_session *(*session_open)(kvm_store *store, char *err, size_t err_len);
   int (*session_close)(kvm_session *session);

   /* The record under key, lent: *record points to record_len bytes valid until this
    * session's next call (a store that cannot lend copies into a buffer of the session's own).
    * KVM_NOT_FOUND when the key is absent. `table` is YCSB's table name (usertable). */
   int (*read)(kvm_session   *s,
               const char    *table,
               const uint8_t *key,
               size_t         key_len,
               const uint8_t **record,
               size_t         *record_len);
   /* Up to `count` records with keys >= start, in key order, each through emit(ctx, ...). */
   int (*scan)(kvm_session   *s,
               const char    *table,
               const uint8_t *start,
               size_t         start_len,
               size_t         count,
               kvm_scan_emit  emit,
               void          *ctx);
   /* The record under key becomes `record` (without KVM_CAP_PARTIAL_UPDATE: the whole merged
    * record; with it: the changed fields only). KVM_NOT_FOUND when the key is absent.
    * May be NULL without KVM_CAP_PARTIAL_UPDATE: kvmeter then writes the merged record with
    * insert, which is all a byte store's update would do. */
   int (*update)(kvm_session   *s,
                 const char    *table,
                 const uint8_t *key,
                 size_t         key_len,
                 const uint8_t *record,
                 size_t         record_len);
   int (*insert)(kvm_session   *s,
                 const char    *table,
                 const uint8_t *key,
                 size_t         key_len,
                 const uint8_t *record,
                 size_t         record_len);
   /* A missing key is not an error (YCSB's delete). */
   int (*remove)(kvm_session *s, const char *table, const uint8_t *key, size_t key_len);

   /* The text of this session's latest error, or NULL; valid until its next call. */
   const char *(*last_error)(kvm_session *s);
} kvm_plugin;

/* The one symbol kvmeter looks up. */
const kvm_plugin *
kvmeter_store_plugin(void);

/*
 * Statistics (optional). A plug-in may export two more functions, both or neither, to put the
 * store's own figures (flushes, compactions, cache hits, bytes it wrote) in store_stats.csv and
 * summary.json on the run's clock, as kvmeter's built-in stores do (docs/plugins.md). They are
 * looked up by name, so the table above and KVMETER_STORE_ABI_VERSION are unchanged: a plug-in
 * without them keeps working, and kvmeter says it reports no statistics.
 *
 *     const kvm_stat *kvmeter_store_stats_declared(void);
 *         The statistics the plug-in reports, ended by an entry with name == NULL; the array
 *         lives as long as the library. Read once, at load: at most 256 entries, names of
 *         a-z, 0-9 and _ (at most 64 bytes, each once; not phase, t_s or unix_us), a unit of
 *         "count", "bytes", "us", "s", "files", "bytes/s" or "bool". Anything else is refused
 *         with one line before a run starts.
 *
 *     int kvmeter_store_stats(kvm_store *store, kvm_stat_emit emit, void *ctx,
 *                             char *err, size_t err_len);
 *         Calls emit(ctx, name, value) for each declared statistic it can read now (one not
 *         emitted is unavailable in this sample; an undeclared name is ignored). Returns 0, or
 *         non-zero with one line in err: the sample is marked unavailable and the run goes
 *         on. Called about once per interval from a thread of kvmeter's own while sessions
 *         run on others, between open and close: read counters the sessions update with
 *         atomic loads. Off the measured path, but its cost is the run's: keep it cheap.
 */
typedef enum kvm_stat_kind {
   KVM_STAT_COUNTER = 0, /* only grows while the store is open: a phase reports its increase */
   KVM_STAT_GAUGE   = 1, /* a level: a phase reports its end value and its highest sample */
} kvm_stat_kind;

/* The part a statistic plays in kvmeter's own figures. */
typedef enum kvm_stat_role {
   KVM_ROLE_PLAIN         = 0, /* nothing beyond itself */
   KVM_ROLE_WORK          = 1, /* the store's own work, counted (flushes, compactions) */
   KVM_ROLE_STORAGE_WRITE = 2, /* bytes the store wrote to storage: cross-checks the kernel's */
   KVM_ROLE_USER_WRITE    = 3, /* bytes of keys and values asked to write: amplification's base */
   KVM_ROLE_USER_READ     = 4, /* bytes the reads returned */
   KVM_ROLE_CACHE_HIT     = 5, /* a cache's hits and misses: the phase's hit ratio */
   KVM_ROLE_CACHE_MISS    = 6,
   KVM_ROLE_STALL         = 7, /* microseconds writers were held back */
   KVM_ROLE_BACKLOG       = 8, /* work owed (a gauge): must not grow for a load to be sustainable */
   KVM_ROLE_UNWRITTEN     = 9, /* bytes accepted, held in memory, not yet in the store's files (a gauge) */
} kvm_stat_role;

typedef struct kvm_stat {
   const char *name;
   const char *unit;
   uint32_t    kind; /* kvm_stat_kind */
   uint32_t    role; /* kvm_stat_role */
   const char *meaning; /* one line, at most 300 bytes (may be NULL) */
} kvm_stat;

typedef void (*kvm_stat_emit)(void *ctx, const char *name, uint64_t value);

/* One field of an encoded record. */
typedef struct kvm_field {
   const uint8_t *name;
   size_t         name_len;
   const uint8_t *value;
   size_t         value_len;
} kvm_field;

/* Walks an encoded record: start with *pos = 0; returns 1 with the next field, 0 at the end,
 * -1 when the bytes are truncated. */
static inline int
kvm_record_next(const uint8_t *rec, size_t len, size_t *pos, kvm_field *f)
{
   size_t p = *pos;
   if (p == len) {
      return 0;
   }
   if (len - p < 2) {
      return -1;
   }
   size_t nlen = (size_t)rec[p] | ((size_t)rec[p + 1] << 8);
   p += 2;
   if (len - p < nlen + 4) {
      return -1;
   }
   f->name     = rec + p;
   f->name_len = nlen;
   p += nlen;
   size_t vlen = (size_t)rec[p] | ((size_t)rec[p + 1] << 8) | ((size_t)rec[p + 2] << 16)
                 | ((size_t)rec[p + 3] << 24);
   p += 4;
   if (len - p < vlen) {
      return -1;
   }
   f->value     = rec + p;
   f->value_len = vlen;
   *pos         = p + vlen;
   return 1;
}

#ifdef __cplusplus
}
#endif

#endif /* KVMETER_STORE_H */
