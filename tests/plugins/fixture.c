/*
 * A store plug-in for kvmeter's own tests (tests/stores/plugins.rs): answers every operation OK like
 * the null store, and misbehaves on request so the tests can check what kvmeter does then.
 *   option crash_after_ms=N  the first operation N ms after open dereferences NULL (SIGSEGV)
 *   option reject=yes        check() refuses the options
 *   -DFIXTURE_ABI=N          declares another ABI version
 *   -DFIXTURE_NO_READ        leaves the required read function NULL
 *   -DFIXTURE_HALF_STATS     exports kvmeter_store_stats_declared without kvmeter_store_stats
 *   -DFIXTURE_BAD_STAT       declares a statistic with an unknown unit
 *   -DFIXTURE_BAD_ROLE       declares memory not yet flushed (KVM_ROLE_UNWRITTEN) as a count
 *   -DFIXTURE_NO_ENTRY       exports no kvmeter_store_plugin symbol
 *   -DFIXTURE_PARTIAL_WITHOUT_UPDATE  declares KVM_CAP_PARTIAL_UPDATE but no update function
 */
#include "kvmeter_store.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef FIXTURE_ABI
#define FIXTURE_ABI KVMETER_STORE_ABI_VERSION
#endif

struct kvm_store {
   long long crash_at_ns; /* 0: never */
};
struct kvm_session {
   kvm_store *store;
};

static long long
now_ns(void)
{
   struct timespec t;
   clock_gettime(CLOCK_MONOTONIC, &t);
   return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void
maybe_crash(kvm_session *s)
{
   if (s->store->crash_at_ns != 0 && now_ns() >= s->store->crash_at_ns) {
      volatile int *p = NULL;
      *p              = 42;
   }
}

static const kvm_option options[] = {
   {"crash_after_ms", "0", "crash (SIGSEGV) on the first operation this long after open"},
   {"reject", "no", "yes: refuse the options in check()"},
   {NULL, NULL, NULL},
};

static int
check(const kvm_options *o, char *err, size_t err_len)
{
   if (strcmp(kvm_option_value(o, "reject"), "yes") == 0) {
      snprintf(err, err_len, "reject=yes: this fixture refuses it");
      return 1;
   }
   return 0;
}

static kvm_store *
open_store(const char *dir, const kvm_options *o, char *err, size_t err_len)
{
   (void)dir, (void)err, (void)err_len;
   kvm_store *st = calloc(1, sizeof *st);
   long long  ms = atoll(kvm_option_value(o, "crash_after_ms"));
   st->crash_at_ns = ms > 0 ? now_ns() + ms * 1000000LL : 0;
   return st;
}

static int
close_store(kvm_store *st, char *err, size_t err_len)
{
   (void)err, (void)err_len;
   free(st);
   return KVM_OK;
}

static kvm_session *
session_open(kvm_store *st, char *err, size_t err_len)
{
   (void)err, (void)err_len;
   kvm_session *s = calloc(1, sizeof *s);
   s->store       = st;
   return s;
}

static int
session_close(kvm_session *s)
{
   free(s);
   return KVM_OK;
}

static int
read_record(kvm_session *s, const char *t, const uint8_t *k, size_t kl, const uint8_t **r, size_t *rl)
{
   (void)t, (void)k, (void)kl;
   maybe_crash(s);
   *r  = NULL;
   *rl = 0;
   return KVM_OK;
}

static int
scan(kvm_session *s, const char *t, const uint8_t *k, size_t kl, size_t n, kvm_scan_emit e, void *c)
{
   (void)t, (void)k, (void)kl, (void)n, (void)e, (void)c;
   maybe_crash(s);
   return KVM_OK;
}

static int
write_record(kvm_session *s, const char *t, const uint8_t *k, size_t kl, const uint8_t *r, size_t rl)
{
   (void)t, (void)k, (void)kl, (void)r, (void)rl;
   maybe_crash(s);
   return KVM_OK;
}

static int
remove_key(kvm_session *s, const char *t, const uint8_t *k, size_t kl)
{
   (void)t, (void)k, (void)kl;
   maybe_crash(s);
   return KVM_OK;
}

#ifndef FIXTURE_NO_ENTRY
const kvm_plugin *
kvmeter_store_plugin(void)
{
   static const kvm_plugin plugin = {
      .abi_version = FIXTURE_ABI,
#ifdef FIXTURE_PARTIAL_WITHOUT_UPDATE
      .capabilities = KVM_CAP_SCAN | KVM_CAP_PARTIAL_UPDATE,
#else
      .capabilities = KVM_CAP_SCAN,
#endif
      .name          = "fixture",
      .version       = "1",
      .summary       = "kvmeter's test fixture",
      .options       = options,
      .check         = check,
      .open          = open_store,
      .close         = close_store,
      .session_open  = session_open,
      .session_close = session_close,
#ifndef FIXTURE_NO_READ
      .read = read_record,
#endif
      .scan = scan,
#ifndef FIXTURE_PARTIAL_WITHOUT_UPDATE
      .update = write_record,
#endif
      .insert = write_record,
      .remove = remove_key,
   };
   return &plugin;
}
#endif

#if defined(FIXTURE_HALF_STATS) || defined(FIXTURE_BAD_STAT) || defined(FIXTURE_BAD_ROLE)
const kvm_stat *
kvmeter_store_stats_declared(void)
{
   static const kvm_stat stats[] = {
#if defined(FIXTURE_BAD_STAT)
      {"calls", "furlongs", KVM_STAT_COUNTER, KVM_ROLE_PLAIN, "a unit kvmeter does not know"},
#elif defined(FIXTURE_BAD_ROLE)
      {"calls", "count", KVM_STAT_COUNTER, KVM_ROLE_UNWRITTEN, "not memory, not bytes"},
#else
      {"calls", "count", KVM_STAT_COUNTER, KVM_ROLE_PLAIN, "calls"},
#endif
      {NULL, NULL, 0, 0, NULL},
   };
   return stats;
}
#endif

#if defined(FIXTURE_BAD_STAT) || defined(FIXTURE_BAD_ROLE)
int
kvmeter_store_stats(kvm_store *st, kvm_stat_emit emit, void *ctx, char *err, size_t err_len)
{
   (void)st, (void)err, (void)err_len;
   emit(ctx, "calls", 1);
   return 0;
}
#endif
