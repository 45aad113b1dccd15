// hutch-egress: `hutch run --net filtered|open`, and `hutch recipe build` with such a network in
// recipe.json. hutch parses the command line, then execs this
// with the same argv (cli/main.cc): the engine links OpenSSL, Boost.Asio and libnftables, which
// is shared only, and hutch stays static.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/egress/run_egress.h"
#include "cli/verbs.h"

int main(int argc, char** argv) {
  using namespace hutch::cli;
  CLI::App app{"hutch-egress: hutch run and recipe build with egress (hutch runs this)"};
  app.require_subcommand(1);
  std::string state_dir;
  add_state_dir_option(app, state_dir);
  RunOptions options;
  CLI::App* run_cmd = add_run_command(app, options);
  RecipeOptions recipe;
  CLI::App* recipe_cmd = app.add_subcommand("recipe", "Bake a recipe whose network has egress");
  CLI::App* build_cmd = add_recipe_build_command(*recipe_cmd, recipe);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitRuntimeFailure;
  }
  if (build_cmd->parsed()) {
    recipe.name_given = build_cmd->count("--name") > 0;
    auto egress = recipe_needs_egress(recipe);
    if (!egress) return fail(egress.error());
    if (!*egress)
      return fail(hutch::plain_error("recipe.json",
                                     "hutch-egress bakes recipes whose network is "
                                     "filtered or open only")
                      .error());
    return recipe_build_with_egress(recipe, state_dir);
  }
  if (!run_cmd->parsed())
    return fail(hutch::plain_error("hutch-egress", "run or recipe build").error());
  if (auto checked = check_run_net_options(options); !checked) return fail(checked.error());
  if (!run_needs_egress(options))
    return fail(hutch::plain_error(
                    "--net", "hutch-egress runs --net filtered or open only, not " + options.net)
                    .error());
  return run_with_egress(options, state_dir);
}
