// A scratch directory `<state>/layers/.incoming-*` (layers::scratch_name): removed with its
// contents when this object goes, and by `hutch layers gc` when this process dies first.
#pragma once

#include <string>

#include "runtime/base/error.h"

namespace hutch::image {

class Scratch {
 public:
  static Result<Scratch> create(const std::string& state_dir);
  Scratch(Scratch&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  Scratch& operator=(Scratch&&) = delete;
  ~Scratch();

  const std::string& path() const { return path_; }
  // The name under <state>/layers.
  std::string name() const { return path_.substr(path_.rfind('/') + 1); }

 private:
  explicit Scratch(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

}  // namespace hutch::image
