// recipe.json's parser (recipes/recipe_json.h, `hutch recipe build`, hutchd-bake) on any text: an
// Error or a result, never a crash, an escaping exception or undefined behaviour.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "recipes/recipe_json.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto recipe = hutch::recipes::parse_recipe_json(
      std::string_view(reinterpret_cast<const char*>(data), size));
  if (!recipe && recipe.error().message().empty()) std::abort();
  if (recipe) {
    for (const std::string& kv : recipe->env) {
      if (kv.find('=') == std::string::npos) std::abort();
    }
  }
  return 0;
}
