// Compiled as part of the passes layer (tests/CMakeLists.txt): the engine
// sits above the passes, so this include must not be found. The test
// build_refuses_an_upward_include expects this file to fail to compile.
#include "engine/session.h"
