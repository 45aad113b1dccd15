// Build-time tool: compiles a seccomp profile (JSON) with libseccomp and prints a C++ source
// that defines default_seccomp_program(), so `hutch run` loads the default filter without
// parsing JSON or running libseccomp on the sandbox start path.
#include <cstdio>
#include <fstream>
#include <sstream>

#include "seccomp/profile.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s PROFILE.json OUTPUT.cc\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", argv[1]);
    return 1;
  }
  auto policy = hutch::parse_seccomp_profile(text.str());
  if (!policy) {
    std::fprintf(stderr, "%s: %s\n", argv[1], policy.error().message().c_str());
    return 1;
  }
  auto program = hutch::compile_seccomp(*policy);
  if (!program) {
    std::fprintf(stderr, "%s: %s\n", argv[1], program.error().message().c_str());
    return 1;
  }
  std::ostringstream out;
  out << "// Generated from " << argv[1] << " by hutch-seccomp-compile. Do not edit.\n"
      << "#include \"seccomp/default_program.h\"\n\nnamespace hutch {\nnamespace {\n";
  for (size_t i = 0; i < program->filters.size(); ++i) {
    out << "const sock_filter kFilter" << i << "[] = {\n";
    for (const sock_filter& insn : program->filters[i]) {
      out << "    {" << insn.code << ", " << int{insn.jt} << ", " << int{insn.jf} << ", " << insn.k
          << "u},\n";
    }
    out << "};\n";
  }
  out << "}  // namespace\n\nSeccompProgram default_seccomp_program() {\n  SeccompProgram "
         "program;\n";
  for (size_t i = 0; i < program->filters.size(); ++i) {
    out << "  program.filters.emplace_back(std::begin(kFilter" << i << "), std::end(kFilter" << i
        << "));\n";
  }
  out << "  return program;\n}\n\n}  // namespace hutch\n";
  std::ofstream file(argv[2]);
  file << out.str();
  return file ? 0 : 1;
}
