#pragma once
// The emulated build's cuda_runtime.h: see ../cuda_emulator.h.
#include "ops/cuda/emulator/cuda_emulator.h"
