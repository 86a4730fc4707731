// Anchor translation unit for the tests' precompiled headers (tests/CMakeLists.txt).
