/*
 * kvm_ramcloud.cc — RAMCloud (PlatformLab/RAMCloud, papers/002) as a kvmeter store plug-in,
 * over RAMCloud's C client API (src/CRamCloud.h). C++ only because RAMCloud's headers are.
 *
 * Build with plugins/ramcloud/build.sh SOURCE_DIR; start a cluster on loopback with
 * plugins/ramcloud/cluster.sh start (docs/plugins.md). The plug-in is a client: it connects to
 * the coordinator at `locator`, creates the table if it is missing, and gives each session its
 * own rc_client (a RamCloud client object is not thread-safe). A record is kvmeter's encoded
 * record stored as the object; reads copy the object into a per-session buffer (rc_read fills
 * a caller's buffer) which is then lent. RAMCloud has no ordered range scan (table enumeration
 * runs in hash order), so scans are not offered and kvmeter reports them N/A.
 */
#include "kvmeter_store.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "CRamCloud.h"

struct kvm_store {
   std::string locator, cluster, table;
   uint64_t    table_id;
};

struct kvm_session {
   kvm_store        *store;
   struct rc_client *client;
   char             *buf; /* the lent object */
   uint32_t          cap;
   char              error[256];
};

static const kvm_option options[] = {
   {"locator", "tcp:host=127.0.0.1,port=11100", "the coordinator's service locator"},
   {"cluster_name", "main", "the cluster name the coordinator and servers were started with"},
   {"table", "usertable", "RAMCloud table the records go to (created when missing)"},
   {"server_span", "1", "servers a new table is spread over"},
   {nullptr, nullptr, nullptr},
};

static int
check(const kvm_options *o, char *err, size_t err_len)
{
   uint64_t span;
   if (kvm_option_u64(o, "server_span", 1, &span, err, err_len) != 0) {
      return -1;
   }
   if (strncmp(kvm_option_value(o, "locator"), "tcp:", 4) != 0
       && strncmp(kvm_option_value(o, "locator"), "basic+udp:", 10) != 0) {
      snprintf(err, err_len, "locator=%s: expected a RAMCloud service locator such as "
               "tcp:host=127.0.0.1,port=11100", kvm_option_value(o, "locator"));
      return -1;
   }
   return 0;
}

static kvm_store *
open_store(const char *dir, const kvm_options *o, char *err, size_t err_len)
{
   (void)dir; /* the data lives in the servers */
   if (check(o, err, err_len) != 0) {
      return nullptr;
   }
   kvm_store *st = new (std::nothrow) kvm_store();
   if (st == nullptr) {
      snprintf(err, err_len, "out of memory");
      return nullptr;
   }
   st->locator = kvm_option_value(o, "locator");
   st->cluster = kvm_option_value(o, "cluster_name");
   st->table   = kvm_option_value(o, "table");
   uint64_t span = 1;
   kvm_option_u64(o, "server_span", 1, &span, err, err_len);
   struct rc_client *c = nullptr;
   Status s = rc_connect(st->locator.c_str(), st->cluster.c_str(), &c);
   if (s == STATUS_OK) {
      s = rc_createTable(c, st->table.c_str(), (uint32_t)span); /* existing: kept */
   }
   if (s == STATUS_OK) {
      s = rc_getTableId(c, st->table.c_str(), &st->table_id);
   }
   if (c != nullptr) {
      rc_disconnect(c);
   }
   if (s != STATUS_OK) {
      snprintf(err, err_len, "RAMCloud at %s (cluster %s): status %d; is a cluster running? "
               "(plugins/ramcloud/cluster.sh start)", st->locator.c_str(), st->cluster.c_str(), (int)s);
      delete st;
      return nullptr;
   }
   return st;
}

static int
close_store(kvm_store *st, char *err, size_t err_len)
{
   (void)err, (void)err_len;
   delete st;
   return KVM_OK;
}

static kvm_session *
session_open(kvm_store *st, char *err, size_t err_len)
{
   kvm_session *s = static_cast<kvm_session *>(calloc(1, sizeof(kvm_session)));
   if (s == nullptr || (s->buf = static_cast<char *>(malloc(4096))) == nullptr) {
      snprintf(err, err_len, "out of memory");
      free(s);
      return nullptr;
   }
   s->cap   = 4096;
   s->store = st;
   Status rc = rc_connect(st->locator.c_str(), st->cluster.c_str(), &s->client);
   if (rc != STATUS_OK) {
      snprintf(err, err_len, "RAMCloud connect to %s: status %d", st->locator.c_str(), (int)rc);
      free(s->buf);
      free(s);
      return nullptr;
   }
   return s;
}

static int
session_close(kvm_session *s)
{
   rc_disconnect(s->client);
   free(s->buf);
   free(s);
   return KVM_OK;
}

static int
fail(kvm_session *s, const char *what, Status rc)
{
   snprintf(s->error, sizeof s->error, "RAMCloud %s: status %d", what, (int)rc);
   switch (rc) {
      case STATUS_TIMEOUT:
         return KVM_ERROR_TIMEOUT;
      case STATUS_RETRY:
         return KVM_ERROR_BUSY;
      default:
         return KVM_ERROR;
   }
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
   for (int attempt = 0; attempt < 2; attempt++) {
      uint32_t actual = 0;
      uint64_t version;
      Status   rc = rc_read(s->client, s->store->table_id, key, (uint16_t)key_len, nullptr,
                          &version, s->buf, s->cap, &actual);
      if (rc == STATUS_OBJECT_DOESNT_EXIST) {
         return KVM_NOT_FOUND;
      }
      if (rc != STATUS_OK) {
         return fail(s, "read", rc);
      }
      if (actual <= s->cap) {
         *record     = reinterpret_cast<const uint8_t *>(s->buf); /* lent until the next call */
         *record_len = actual;
         return KVM_OK;
      }
      char *b = static_cast<char *>(realloc(s->buf, actual)); /* larger: grow, read again */
      if (b == nullptr) {
         snprintf(s->error, sizeof s->error, "out of memory for a %u-byte object", actual);
         return KVM_ERROR;
      }
      s->buf = b;
      s->cap = actual;
   }
   return KVM_ERROR;
}

static int
put(kvm_session *s, const uint8_t *key, size_t key_len, const uint8_t *rec, size_t rec_len)
{
   uint64_t version;
   Status   rc = rc_write(s->client, s->store->table_id, key, (uint16_t)key_len, rec,
                        (uint32_t)rec_len, nullptr, &version);
   return rc == STATUS_OK ? KVM_OK : fail(s, "write", rc);
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
   uint64_t version;
   Status   rc = rc_remove(s->client, s->store->table_id, key, (uint16_t)key_len, nullptr, &version);
   return rc == STATUS_OK || rc == STATUS_OBJECT_DOESNT_EXIST ? KVM_OK : fail(s, "remove", rc);
}

static const char *
last_error(kvm_session *s)
{
   return s->error[0] != '\0' ? s->error : nullptr;
}

#ifndef RAMCLOUD_VERSION
#define RAMCLOUD_VERSION "unknown"
#endif

extern "C" const kvm_plugin *
kvmeter_store_plugin(void)
{
   static kvm_plugin plugin;
   plugin.abi_version   = KVMETER_STORE_ABI_VERSION;
   plugin.capabilities  = KVM_CAP_STORES_DATA; /* no ordered scan; data lives in the servers */
   plugin.name          = "ramcloud";
   plugin.version       = RAMCLOUD_VERSION;
   plugin.summary       = "RAMCloud (Stanford) client: in-memory, log-structured, replicated; built from source";
   plugin.options       = options;
   plugin.check         = check;
   plugin.open          = open_store;
   plugin.close         = close_store;
   plugin.session_open  = session_open;
   plugin.session_close = session_close;
   plugin.read          = read_record;
   plugin.scan          = nullptr;
   plugin.update        = nullptr;
   plugin.insert        = insert;
   plugin.remove        = remove_key;
   plugin.last_error    = last_error;
   return &plugin;
}
