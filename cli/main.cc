// hutch: the command-line face of the runtime. Parses arguments and calls the verb (cli/verbs.h),
// which calls the runtime and maps the outcome to an exit status. No kernel work here.
#include <CLI/CLI.hpp>
#include <string>

#include "cli/verbs.h"

int main(int argc, char** argv) {
  using namespace hutch::cli;
  if (argc > 1 && is_client_verb(argv[1]))
    return exec_companion(argv, "hutch-client", "hutch's hutchd verbs");
  // `hutch image ...` is served by hutch-image: it links libarchive, whose static dependencies
  // (compression libraries) are not all available as archives.
  if (is_image_verb(argc, argv)) return exec_companion(argv, "hutch-image", "hutch image");
  CLI::App app{"hutch: lightweight Linux sandboxes from namespaces, overlayfs and seccomp"};
  app.footer(
      "Verbs served by hutchd (see hutch VERB --help): create, ls, inspect, exec, cp, rm, pause,\n"
      "resume, logs, port-forward, shell, volume. They find it at --socket PATH ($HUTCH_SOCKET, "
      "default\n"
      "/run/hutch/hutchd.sock) or --url http://HOST:PORT with --token-file; they exit 125 when\n"
      "hutchd answers an error or cannot be reached (exec: the command's own status).\n"
      "hutch image export|load|import|ls|rm (see hutch image --help): move layers between\n"
      "machines as tar streams, import rootfs/OCI/docker images as --rootfs image:NAME, list and\n"
      "remove them (served by hutch-image).");
  app.require_subcommand(1);
  std::string state_dir;
  add_state_dir_option(app, state_dir);

  RunOptions options;
  CLI::App* run_cmd = add_run_command(app, options);

  bool info_json = false;
  CLI::App* info_cmd = app.add_subcommand("info", "Report the kernel features hutch uses");
  info_cmd->add_flag("--json", info_json, "JSON output");

  RecipeOptions recipe;
  CLI::App* recipe_cmd = app.add_subcommand("recipe", "Bake and list recipes (setup.sh layers)");
  recipe_cmd->require_subcommand(1);
  CLI::App* build_cmd = add_recipe_build_command(*recipe_cmd, recipe);
  CLI::App* recipe_ls_cmd = recipe_cmd->add_subcommand("ls", "List recipes");
  recipe_ls_cmd->add_flag("--json", recipe.json, "JSON output");

  LayerOptions layer_options;
  CLI::App* layers_cmd = app.add_subcommand("layers", "The layer store: ls, du, rm, gc");
  layers_cmd->require_subcommand(1);
  CLI::App* layers_ls_cmd = layers_cmd->add_subcommand("ls", "List layers");
  layers_ls_cmd->add_flag("--json", layer_options.json, "JSON output");
  CLI::App* layers_du_cmd = layers_cmd->add_subcommand("du", "Disk use of the store");
  CLI::App* layers_rm_cmd = layers_cmd->add_subcommand("rm", "Remove layers (not tagged ones)");
  layers_rm_cmd->add_option("digest", layer_options.digests, "sha256:... (or the hex)")->required();
  CLI::App* layers_gc_cmd =
      layers_cmd->add_subcommand("gc", "Remove layers no recipe, snapshot or sandbox uses");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitRuntimeFailure;
  }
  if (run_cmd->parsed()) {
    if (auto checked = check_run_net_options(options); !checked) return fail(checked.error());
    // Egress goes through the network engine, which hutch-egress runs beside the sandbox: it
    // links OpenSSL, Boost.Asio and libnftables (shared only), and hutch stays static.
    if (run_needs_egress(options))
      return exec_companion(argv, "hutch-egress", "hutch run --net filtered|open");
    return run(options, state_dir);
  }
  recipe.name_given = build_cmd->count("--name") > 0;
  if (build_cmd->parsed()) {
    // A network in recipe.json with egress: setup.sh runs beside the engine, in hutch-egress.
    auto egress = recipe_needs_egress(recipe);
    if (!egress) return fail(egress.error());
    if (*egress)
      return exec_companion(argv, "hutch-egress",
                            "hutch recipe build with a filtered or open "
                            "network in recipe.json");
    return recipe_build(recipe, state_dir);
  }
  if (recipe_ls_cmd->parsed()) return recipe_list(recipe.json, state_dir);
  if (layers_ls_cmd->parsed()) return layers_list(layer_options.json, state_dir);
  if (layers_du_cmd->parsed()) return layers_du(state_dir);
  if (layers_rm_cmd->parsed()) return layers_remove(layer_options.digests, state_dir);
  if (layers_gc_cmd->parsed()) return layers_gc(state_dir);
  return info(info_json);
}
