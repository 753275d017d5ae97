// Umbrella header.
#pragma once
#include "replayssm/backend.hpp"
#include "replayssm/cursor.hpp"
#include "replayssm/dtype.hpp"
#include "replayssm/error.hpp"
#include "replayssm/gdn.hpp"
#include "replayssm/geometry.hpp"
#include "replayssm/mamba2.hpp"
#include "replayssm/tensor.hpp"
#include "replayssm/traffic.hpp"
