// replayssm: command-line front end of the library (demo, bench, plan).
#include <cstdio>

#include "replayssm/error.hpp"
#include "replayssm/replayssm.hpp"
#include "replayssm/commands.hpp"  // tools/replayssm/commands.hpp

int main(int argc, char** argv) {
  CLI::App app{"replayssm: ReplaySSM decode for Mamba-2 and Gated DeltaNet layers (checkpoint + input ring)"};
  app.require_subcommand(1);
  replayssm::tools::register_demo(app);
  replayssm::tools::register_bench(app);
  replayssm::tools::register_plan(app);
  replayssm::tools::register_bench_spec(app);
  replayssm::tools::register_bench_gdn(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const replayssm::Error& e) {
    std::fprintf(stderr, "replayssm: error: %s\n", e.what());
    return 2;
  }
  return 0;
}
