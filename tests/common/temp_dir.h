// A throwaway directory under /tmp, removed with everything in it on every path.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <string>

namespace hutch::testing {

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/hutch-test-XXXXXX";
    if (mkdtemp(pattern) != nullptr) path_ = pattern;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace hutch::testing
