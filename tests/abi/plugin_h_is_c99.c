/* plugin.h compiles as strict C99 with no other project header
 * (built with -std=c99 -pedantic -Werror by tests/CMakeLists.txt). */
#include <switchyard/plugin.h>

int plugin_h_is_c99_sizeof_host(void) { return (int)sizeof(sy_host_api); }
