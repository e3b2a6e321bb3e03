/*
 * kvm_parallax.c — Parallax (CARV-ICS-FORTH/parallax), the successor of Kreon (papers/000), as
 * a kvmeter store plug-in over Parallax's public API (lib/include/parallax/parallax.h).
 *
 * Build with plugins/parallax/build.sh SOURCE_DIR (docs/plugins.md).
 *
 * Parallax keeps its data in one volume (a file or a block device) that par_format() lays out;
 * the plug-in makes a sparse file of volume_size_gb in the data directory, formats it on first
 * open, and opens the database "kvmeter" in it. A record is kvmeter's encoded record stored as
 * Parallax's value; reads copy the value into a per-session buffer (Parallax's par_get packs
 * the value into a caller's buffer) and lend that buffer; updates arrive as the whole merged
 * record and are puts that overwrite.
 *
 * build.sh applies volume-map-double-add.patch to Parallax first: without it a second open of
 * a volume in one process (par_format then par_open already is one) corrupts Parallax's volume
 * map and a later open spins forever.
 */
#define _GNU_SOURCE
#include "kvmeter_store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <parallax/parallax.h>

struct kvm_store {
   par_handle db;
   char       path[4096];
};

struct kvm_session {
   kvm_store *store;
   char      *buf; /* the lent value */
   uint32_t   cap;
   char       error[256];
};

static const kvm_option options[] = {
   {"volume_size_gb", "16", "size of the sparse volume file Parallax formats, in GiB (at least 16)"},
   {"max_regions", "128", "regions par_format lays out in the volume"},
   {"level0_size_mb", "0", "L0 size in MiB (0: options.yml's, Parallax's default)"},
   {"growth_factor", "0", "level growth factor (0: options.yml's)"},
   {NULL, NULL, NULL},
};

struct settings {
   uint64_t volume_gb, regions, l0_mb, growth;
};

static int
settings_of(const kvm_options *o, struct settings *s, char *err, size_t err_len)
{
   return kvm_option_u64(o, "volume_size_gb", 1, &s->volume_gb, err, err_len) != 0
                || kvm_option_u64(o, "max_regions", 1, &s->regions, err, err_len) != 0
                || kvm_option_u64(o, "level0_size_mb", 0, &s->l0_mb, err, err_len) != 0
                || kvm_option_u64(o, "growth_factor", 0, &s->growth, err, err_len) != 0
             ? -1
             : 0;
}

static int
check(const kvm_options *o, char *err, size_t err_len)
{
   struct settings s;
   return settings_of(o, &s, err, err_len);
}

static kvm_store *
open_store(const char *dir, const kvm_options *o, char *err, size_t err_len)
{
   struct settings s;
   if (settings_of(o, &s, err, err_len) != 0) {
      return NULL;
   }
   kvm_store *st = calloc(1, sizeof *st);
   if (st == NULL) {
      snprintf(err, err_len, "out of memory");
      return NULL;
   }
   snprintf(st->path, sizeof st->path, "%s/parallax.vol", dir);
   struct stat sb;
   if (stat(st->path, &sb) != 0) {
      /* A new volume: a sparse file, formatted by Parallax. */
      int fd = open(st->path, O_CREAT | O_EXCL | O_RDWR, 0644);
      if (fd < 0 || ftruncate(fd, (off_t)(s.volume_gb << 30)) != 0) {
         snprintf(err, err_len, "cannot make the volume %s: %s", st->path, strerror(errno));
         if (fd >= 0) {
            close(fd);
         }
         free(st);
         return NULL;
      }
      close(fd);
      const char *e = par_format(st->path, (uint32_t)s.regions);
      if (e != NULL) {
         snprintf(err, err_len, "par_format %s: %s", st->path, e);
         free(st);
         return NULL;
      }
   }
   par_db_options db = {0};
   db.volume_name    = st->path;
   db.db_name        = "kvmeter";
   db.create_flag    = PAR_CREATE_DB;
   db.options        = par_get_default_options();
   if (s.l0_mb != 0) {
      db.options[LEVEL0_SIZE].value = s.l0_mb << 20;
   }
   if (s.growth != 0) {
      db.options[GROWTH_FACTOR].value = s.growth;
   }
   const char *e = NULL;
   st->db        = par_open(&db, &e);
   if (st->db == NULL || e != NULL) {
      snprintf(err, err_len, "par_open %s: %s", st->path, e != NULL ? e : "failed");
      free(st);
      return NULL;
   }
   return st;
}

static int
close_store(kvm_store *st, char *err, size_t err_len)
{
   const char *e = par_close(st->db);
   free(st);
   if (e != NULL) {
      snprintf(err, err_len, "par_close: %s", e);
      return KVM_ERROR;
   }
   return KVM_OK;
}

static kvm_session *
session_open(kvm_store *st, char *err, size_t err_len)
{
   kvm_session *s = calloc(1, sizeof *s);
   if (s == NULL || (s->buf = malloc(4096)) == NULL) {
      snprintf(err, err_len, "out of memory");
      free(s);
      return NULL;
   }
   s->cap   = 4096;
   s->store = st;
   return s;
}

static int
session_close(kvm_session *s)
{
   free(s->buf);
   free(s);
   return KVM_OK;
}

static int
fail(kvm_session *s, const char *what, const char *e)
{
   snprintf(s->error, sizeof s->error, "Parallax %s: %s", what, e);
   return KVM_ERROR;
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
   struct par_key k = {.size = (uint32_t)key_len, .data = (const char *)key};
   for (int attempt = 0; attempt < 2; attempt++) {
      struct par_value v = {.val_buffer_size = s->cap, .val_size = 0, .val_buffer = s->buf};
      const char      *e = NULL;
      par_get(s->store->db, &k, &v, &e);
      if (e == NULL) {
         *record     = (const uint8_t *)v.val_buffer; /* lent until the session's next call */
         *record_len = v.val_size;
         return KVM_OK;
      }
      if (strcmp(e, "key not found") == 0) {
         return KVM_NOT_FOUND;
      }
      if (strcmp(e, "not enough buffer space") != 0 || attempt == 1) {
         return fail(s, "get", e);
      }
      /* Grow to the size Parallax reported (or double) and ask again. */
      uint32_t want = v.val_size > s->cap ? v.val_size : s->cap * 2;
      char    *b    = realloc(s->buf, want);
      if (b == NULL) {
         return fail(s, "get", "out of memory");
      }
      s->buf = b;
      s->cap = want;
   }
   return KVM_ERROR;
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
   struct par_key k  = {.size = (uint32_t)start_len, .data = (const char *)start};
   const char    *e  = NULL;
   par_scanner    sc = par_init_scanner(s->store->db, &k, PAR_GREATER_OR_EQUAL, &e);
   if (e != NULL) {
      return fail(s, "scanner", e);
   }
   int status = KVM_OK;
   for (size_t i = 0; i < count && par_is_valid(sc); i++) {
      struct par_key   key = par_get_key(sc);
      struct par_value val = par_get_value(sc);
      if (emit(ctx, (const uint8_t *)key.data, key.size, (const uint8_t *)val.val_buffer,
               val.val_size)
          != 0) {
         status = KVM_ERROR_CORRUPTION;
         break;
      }
      par_get_next(sc);
   }
   par_close_scanner(sc);
   return status;
}

static int
put(kvm_session *s, const uint8_t *key, size_t key_len, const uint8_t *rec, size_t rec_len)
{
   struct par_key_value kv = {
      .k = {.size = (uint32_t)key_len, .data = (const char *)key},
      .v = {.val_buffer_size = (uint32_t)rec_len, .val_size = (uint32_t)rec_len,
            .val_buffer = (char *)rec},
   };
   const char *e = NULL;
   par_put(s->store->db, &kv, &e);
   return e == NULL ? KVM_OK : fail(s, "put", e);
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
   struct par_key k = {.size = (uint32_t)key_len, .data = (const char *)key};
   const char    *e = NULL;
   par_delete(s->store->db, &k, &e);
   /* YCSB's delete: a missing key is not an error. */
   if (e != NULL && strstr(e, "not found") == NULL) {
      return fail(s, "delete", e);
   }
   return KVM_OK;
}

static const char *
last_error(kvm_session *s)
{
   return s->error[0] != '\0' ? s->error : NULL;
}

#ifndef PARALLAX_VERSION
#define PARALLAX_VERSION "unknown"
#endif

const kvm_plugin *
kvmeter_store_plugin(void)
{
   static const kvm_plugin plugin = {
      .abi_version   = KVMETER_STORE_ABI_VERSION,
      .capabilities  = KVM_CAP_SCAN | KVM_CAP_PERSISTENT | KVM_CAP_STORES_DATA,
      .name          = "parallax",
      .version       = PARALLAX_VERSION,
      .summary       = "Parallax (FORTH-ICS), Kreon's successor: LSM with hybrid KV placement, built from source",
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
   return &plugin;
}
