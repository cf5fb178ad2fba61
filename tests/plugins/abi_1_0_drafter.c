/* A plugin written in C against the frozen 1.0 plugin.h (tests/abi/v1_0):
 * its drafter descriptor ends where 1.0 ended, before propose_sampled. A
 * newer host must load it and use it, reading no field past its
 * struct_size. Proposes the k tokens that followed the latest earlier
 * occurrence of the last token (a bigram lookup). */
#include <switchyard/plugin.h>

#if SY_PLUGIN_ABI_MINOR != 0
#error "this plugin must be built against the 1.0 header"
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
static const sy_plugin_info info = {sizeof(sy_plugin_info), SY_PLUGIN_ABI_MAJOR, SY_PLUGIN_ABI_MINOR, "abi-1.0-drafter", "1.0.0",
                                    "a drafter built against ABI 1.0", NULL, NULL, 0, NULL, 0, NULL, 0, NULL, 0, drafters, 1,
                                    NULL};

SY_PLUGIN_EXPORT const sy_plugin_info* switchyard_plugin_init(const sy_host_api* host) {
  g_host = host;
  return &info;
}
