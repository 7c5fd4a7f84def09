#pragma once
// The emulated build's cuda_fp16.h: see ../cuda_emulator.h.
#include "ops/cuda/emulator/cuda_emulator.h"
