// The source that gradsync_torch_pch compiles its precompiled header with
// (src/torch/CMakeLists.txt).
