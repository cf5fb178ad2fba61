/* libswitchyard.so is the core linked whole; its exported surface is
 * switchyard.h (see switchyard.map). This file gives the target a source. */
#include "switchyard/switchyard.h"
