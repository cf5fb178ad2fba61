/* A shared library that is not a Switchyard plugin: no entry point. */
#include <switchyard/plugin.h>

SY_PLUGIN_EXPORT int some_other_function(void) { return 42; }
