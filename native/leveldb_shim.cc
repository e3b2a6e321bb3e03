// A flat C face over Google LevelDB's C++ API for kvmeter's leveldb adapter
// (src/store/leveldb.rs).
//
// LevelDB's own C API (leveldb/c.h) returns every read as a fresh malloc'd copy; the C++ API
// reads into a caller's std::string, which this shim keeps per session and reuses, so the
// steady-state read path allocates nothing (kvmeter's hot-path rule). It links Debian's real
// libleveldb, not a re-implementation.
#include <cstring>
#include <string>

#include <leveldb/cache.h>
#include <leveldb/db.h>
#include <leveldb/filter_policy.h>
#include <leveldb/iterator.h>
#include <leveldb/options.h>
#include <leveldb/write_batch.h>

struct kvm_ldb {
  leveldb::DB* db = nullptr;
  leveldb::Cache* cache = nullptr;
  const leveldb::FilterPolicy* filter = nullptr;
};

static void set_err(const leveldb::Status& s, char* err, size_t errlen) {
  if (err == nullptr || errlen == 0) return;
  std::string m = s.ToString();
  size_t n = m.size() < errlen - 1 ? m.size() : errlen - 1;
  std::memcpy(err, m.data(), n);
  err[n] = 0;
}

// 0 ok, 1 not found, 2 corruption, 3 I/O error, 4 other.
static int code(const leveldb::Status& s) {
  if (s.ok()) return 0;
  if (s.IsNotFound()) return 1;
  if (s.IsCorruption()) return 2;
  if (s.IsIOError()) return 3;
  return 4;
}

extern "C" {

int kvm_ldb_version_major() { return leveldb::kMajorVersion; }
int kvm_ldb_version_minor() { return leveldb::kMinorVersion; }

kvm_ldb* kvm_ldb_open(const char* path, size_t cache_bytes, size_t write_buffer, int bloom_bits,
                      int snappy, size_t max_open_files, char* err, size_t errlen) {
  kvm_ldb* h = new kvm_ldb();
  leveldb::Options o;
  o.create_if_missing = true;
  o.write_buffer_size = write_buffer;
  o.max_open_files = static_cast<int>(max_open_files);
  o.compression = snappy ? leveldb::kSnappyCompression : leveldb::kNoCompression;
  if (cache_bytes > 0) {
    h->cache = leveldb::NewLRUCache(cache_bytes);
    o.block_cache = h->cache;
  }
  if (bloom_bits > 0) {
    h->filter = leveldb::NewBloomFilterPolicy(bloom_bits);
    o.filter_policy = h->filter;
  }
  leveldb::Status s = leveldb::DB::Open(o, path, &h->db);
  if (!s.ok()) {
    set_err(s, err, errlen);
    delete h->cache;
    delete h->filter;
    delete h;
    return nullptr;
  }
  return h;
}

void kvm_ldb_close(kvm_ldb* h) {
  delete h->db;
  delete h->cache;
  delete h->filter;
  delete h;
}

std::string* kvm_ldb_buf_new() { return new std::string(); }
void kvm_ldb_buf_free(std::string* b) { delete b; }

int kvm_ldb_get(kvm_ldb* h, const char* k, size_t kl, std::string* buf, const char** v,
                size_t* vl, char* err, size_t errlen) {
  leveldb::Status s = h->db->Get(leveldb::ReadOptions(), leveldb::Slice(k, kl), buf);
  if (s.ok()) {
    *v = buf->data();
    *vl = buf->size();
  } else if (!s.IsNotFound()) {
    set_err(s, err, errlen);
  }
  return code(s);
}

int kvm_ldb_put(kvm_ldb* h, const char* k, size_t kl, const char* v, size_t vl, int sync,
                char* err, size_t errlen) {
  leveldb::WriteOptions w;
  w.sync = sync != 0;
  leveldb::Status s = h->db->Put(w, leveldb::Slice(k, kl), leveldb::Slice(v, vl));
  set_err(s, err, s.ok() ? 0 : errlen);
  return code(s);
}

int kvm_ldb_del(kvm_ldb* h, const char* k, size_t kl, int sync, char* err, size_t errlen) {
  leveldb::WriteOptions w;
  w.sync = sync != 0;
  leveldb::Status s = h->db->Delete(w, leveldb::Slice(k, kl));
  set_err(s, err, s.ok() ? 0 : errlen);
  return code(s);
}

leveldb::Iterator* kvm_ldb_iter(kvm_ldb* h) { return h->db->NewIterator(leveldb::ReadOptions()); }
void kvm_ldb_iter_free(leveldb::Iterator* it) { delete it; }
void kvm_ldb_iter_seek(leveldb::Iterator* it, const char* k, size_t kl) {
  it->Seek(leveldb::Slice(k, kl));
}
int kvm_ldb_iter_valid(leveldb::Iterator* it) { return it->Valid() ? 1 : 0; }
void kvm_ldb_iter_next(leveldb::Iterator* it) { it->Next(); }
void kvm_ldb_iter_entry(leveldb::Iterator* it, const char** k, size_t* kl, const char** v,
                        size_t* vl) {
  leveldb::Slice ks = it->key(), vs = it->value();
  *k = ks.data();
  *kl = ks.size();
  *v = vs.data();
  *vl = vs.size();
}
int kvm_ldb_iter_status(leveldb::Iterator* it, char* err, size_t errlen) {
  leveldb::Status s = it->status();
  set_err(s, err, s.ok() ? 0 : errlen);
  return code(s);
}

// A DB property ("leveldb.stats", "leveldb.num-files-at-level0", ...): its whole length, with
// at most outlen bytes of it copied to out, or -1 when LevelDB has no such property. Called
// by the statistics sampler only, never on the hot path (GetProperty builds a string).
long kvm_ldb_property(kvm_ldb* h, const char* name, char* out, size_t outlen) {
  std::string v;
  if (!h->db->GetProperty(leveldb::Slice(name), &v)) return -1;
  size_t n = v.size() < outlen ? v.size() : outlen;
  memcpy(out, v.data(), n);
  return static_cast<long>(v.size());
}

}  // extern "C"
