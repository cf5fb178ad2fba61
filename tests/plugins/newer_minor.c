/* A plugin, written in C, built against a newer MINOR version of the ABI
 * whose descriptors gained trailing fields: an older host must load it,
 * reading only the fields it knows. Provides a working Neg kernel. */
#include <switchyard/plugin.h>

/* What ABI 1.99 might look like: the 1.0 struct plus appended fields. */
typedef struct kernel_desc_1_99 {
  sy_kernel_desc v1_0;
  int64_t workspace_bytes; /* new in "1.99" */
  const char* tuning_hint; /* new in "1.99" */
} kernel_desc_1_99;

typedef struct plugin_info_1_99 {
  sy_plugin_info v1_0;
  const void* future_kinds; /* new in "1.99" */
  int32_t num_future_kinds;
} plugin_info_1_99;

static const sy_host_api* g_host;

static sy_status neg_create(void* data, const sy_kernel_create_info* info, void** state) {
  (void)data;
  (void)info;
  *state = NULL;
  return SY_OK;
}

static sy_status neg_compute(void* state, sy_kernel_context* ctx) {
  sy_tensor x, y;
  sy_status s;
  int64_t i, n = 1;
  (void)state;
  s = g_host->kernel_input(ctx, 0, &x);
  if (s != SY_OK) return s;
  if (x.dtype != SY_DTYPE_FLOAT32) {
    g_host->set_error("newer-minor Neg: float32 only");
    return SY_INVALID_ARGUMENT;
  }
  s = g_host->kernel_allocate_output(ctx, 0, x.dtype, x.dims, x.rank, &y);
  if (s != SY_OK) return s;
  for (i = 0; i < x.rank; ++i) n *= x.dims[i];
  for (i = 0; i < n; ++i) ((float*)y.data)[i] = -((const float*)x.data)[i];
  return SY_OK;
}

static void neg_destroy(void* state) { (void)state; }

static const int32_t f32[] = {SY_DTYPE_FLOAT32};
static kernel_desc_1_99 neg = {
    {sizeof(kernel_desc_1_99), "neg_f32", "1.99.0", "", "Neg", SY_DEVICE_CPU, f32, 1, 0, 50, neg_create, neg_compute,
     neg_destroy},
    4096, "fast"};
static const sy_kernel_desc* kernels[] = {&neg.v1_0};
static plugin_info_1_99 info = {{sizeof(plugin_info_1_99), SY_PLUGIN_ABI_MAJOR, SY_PLUGIN_ABI_MINOR + 99, "newer-minor",
                                 "1.99.0", "built against a newer minor ABI", NULL, NULL, 0, kernels, 1, NULL, 0, NULL, 0,
                                 NULL, 0, NULL},
                                NULL, 0};

SY_PLUGIN_EXPORT const sy_plugin_info* switchyard_plugin_init(const sy_host_api* host) {
  g_host = host;
  return &info.v1_0;
}
