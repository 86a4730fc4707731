// Precompiled header of the test programs: GoogleTest, nlohmann/json and the standard headers
// most test files include. Parsing these costs a test file several seconds on these machines,
// and every one of the suite's ~100 test files paid it (tests/CMakeLists.txt says which
// programs get it, alone or after src/pch's libtorch headers).
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
