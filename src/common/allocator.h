// The allocator policy is public (gradsync/allocator.h): the Python package applies it too.
#pragma once

#include "gradsync/allocator.h"
