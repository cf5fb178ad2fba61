/* A plugin written in C against the frozen 1.0 plugin.h (tests/abi/v1_0):
 * its drafter descriptor ends where 1.0 ended, before propose_sampled, and
 * its scheduler reads sy_sched_seq arrays at the 1.0 element size (48
 * bytes; 1.3 made them 56). A newer host must load it and use it, reading
 * no field past its struct_size and laying arrays out as 1.0 did.
 *   drafter "bigram-1.0"   the k tokens that followed the latest earlier
 *                          occurrence of the last token (a bigram lookup)
 *   scheduler "fcfs-1.0"   running sequences, then waiting ones, each all
 *                          its remaining tokens within the budget */
#include <switchyard/plugin.h>

/* Also built against the frozen 1.3 header (tests/abi/v1_3, with
 * SY_TEST_ABI_MINOR=3): the minor before logits processors (1.4) appended a
 * list to sy_plugin_info, which such a plugin's description lacks. */
#ifndef SY_TEST_ABI_MINOR
#define SY_TEST_ABI_MINOR 0
#endif
#if SY_PLUGIN_ABI_MINOR != SY_TEST_ABI_MINOR
#error "this plugin must be built against the header of the minor it names (tests/abi/v1_<minor>)"
#endif

static const sy_host_api* g_host;

static sy_status bigram_create(void* data, const sy_options* options, void** state) {
  (void)data;
  (void)options;
  *state = NULL;
  return SY_OK;
}

static sy_status bigram_propose(void* state, uint64_t seq, const int32_t* tokens, int32_t n, int32_t k, int32_t* out,
                                int32_t* count) {
  int32_t j, i;
  (void)state;
  (void)seq;
  *count = 0;
  if (n < 2) return SY_OK;
  for (j = n - 2; j >= 0; --j) {
    if (tokens[j] != tokens[n - 1]) continue;
    for (i = 0; i < k && j + 1 + i < n; ++i) out[i] = tokens[j + 1 + i];
    *count = i;
    return SY_OK;
  }
  return SY_OK;
}

static void bigram_destroy(void* state) { (void)state; }

static const sy_option_desc k_option = {sizeof(sy_option_desc), "k", SY_OPTION_INT, "3", "tokens per step"};
static const sy_option_desc* const options[] = {&k_option};
static const sy_drafter_desc bigram = {sizeof(sy_drafter_desc), "bigram-1.0", "1.0.0", "bigram lookup, ABI 1.0", options, 1,
                                       bigram_create, bigram_propose, NULL, NULL, bigram_destroy};
static const sy_drafter_desc* const drafters[] = {&bigram};

static sy_status fcfs_create(void* data, const sy_options* options, void** state) {
  (void)data;
  (void)options;
  *state = NULL;
  return SY_OK;
}
/* 1.0 had no remaining_tokens: prompt_len + generated - computed_len. */
static int32_t fcfs_remaining(const sy_sched_seq* s) { return s->prompt_len + s->generated - s->computed_len; }
static sy_status fcfs_plan(void* state, const sy_sched_input* in, sy_sched_decision* out, int32_t capacity, int32_t* count) {
  int32_t i, n = 0, budget = in->token_budget, t;
  (void)state;
  for (i = 0; i < in->num_running && n < capacity && budget > 0; ++i) {
    t = fcfs_remaining(&in->running[i]) < budget ? fcfs_remaining(&in->running[i]) : budget;
    if (t <= 0) continue;
    out[n].seq_id = in->running[i].id;
    out[n].action = SY_SCHED_RUN;
    out[n++].num_tokens = t;
    budget -= t;
  }
  for (i = 0; i < in->num_waiting && n < capacity && budget > 0 && n < in->max_seqs; ++i) {
    t = fcfs_remaining(&in->waiting[i]) < budget ? fcfs_remaining(&in->waiting[i]) : budget;
    if (t <= 0) break;
    out[n].seq_id = in->waiting[i].id;
    out[n].action = SY_SCHED_RUN;
    out[n++].num_tokens = t;
    budget -= t;
  }
  *count = n;
  return SY_OK;
}
static void fcfs_destroy(void* state) { (void)state; }
static const sy_scheduler_desc fcfs = {sizeof(sy_scheduler_desc), "fcfs-1.0", "1.0.0", "first come first served, ABI 1.0", NULL, 0,
                                       fcfs_create, fcfs_plan, fcfs_destroy};
static const sy_scheduler_desc* const schedulers[] = {&fcfs};
static const sy_plugin_info info = {sizeof(sy_plugin_info), SY_PLUGIN_ABI_MAJOR, SY_PLUGIN_ABI_MINOR, "abi-1.0-drafter", "1.0.0",
                                    "a drafter and a scheduler built against ABI 1.0", NULL, NULL, 0, NULL, 0, schedulers, 1, NULL, 0, drafters, 1,
                                    NULL};

SY_PLUGIN_EXPORT const sy_plugin_info* switchyard_plugin_init(const sy_host_api* host) {
  g_host = host;
  return &info;
}
