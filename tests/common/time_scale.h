// Time bounds of behaviour tests (a sibling answers, a refusal comes at once) are stated for the
// development machines; under qemu's TCG (scripts/test-vm.sh sets HUTCH_IN_VM=1) code runs 5-6x
// slower, so the bounds stretch by that much there. Figures belong in bench/, not here.
#pragma once

#include <cstdlib>

namespace hutch::testing {

inline double time_scale() { return std::getenv("HUTCH_IN_VM") != nullptr ? 6.0 : 1.0; }

}  // namespace hutch::testing
