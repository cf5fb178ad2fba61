/* A plugin, written in C, built for a future ABI major version: the host
 * must refuse it with a message naming both versions. */
#include <switchyard/plugin.h>

static const sy_plugin_info info = {
    sizeof(sy_plugin_info), SY_PLUGIN_ABI_MAJOR + 1, 0, "from-the-future", "9.0.0", "", NULL,
    NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL, 0, NULL};

SY_PLUGIN_EXPORT const sy_plugin_info* switchyard_plugin_init(const sy_host_api* host) {
  (void)host;
  return &info;
}
