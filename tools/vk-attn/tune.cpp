// vk-attn tune: times every catalogued kernel variant (the forward's, and on backward shapes the
// backward's) over a grid of shapes on the user's device,
// keeps the fastest per bucket of problems and writes them beside the pipeline cache, where every
// later context on this device and driver finds them (vkattn/tune.hpp). One row per shape and
// variant; the winners marked, and any variant whose output disagreed with the heuristics' choice.
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "output_table.hpp"
#include "vkattn/vkattn.hpp"

namespace vkattn::tool {
namespace {

struct TuneFlags {
    std::string device;
    bool quick = false;  // a small grid (seconds on a CPU device): the command's own test
    int warmup = 2, repeat = 5;
    bool dry_run = false;  // time and print, write nothing
    std::vector<std::string> variants;  // empty: every catalogued one
};

// Small shapes of every kind: a decode step and a causal prefill at D 64, and a causal backward at D 32.
std::vector<TuneShape> quick_grid() {
    return {{.B = 1, .Hq = 8, .Hkv = 2, .Nq = 1, .Nkv = 512, .D = 64, .causal = true},
            {.B = 1, .Hq = 4, .Hkv = 4, .Nq = 128, .Nkv = 128, .D = 64, .causal = true},
            {.B = 1, .Hq = 2, .Hkv = 2, .Nq = 64, .Nkv = 64, .D = 32, .causal = true, .backward = true}};
}

int tune_command(const TuneFlags& flags) {
    ContextOptions options;
    options.device = flags.device;
    Context context(options);
    std::cerr << "tuning " << context.device().name << " (" << context.device().type << ", " << context.device().driver
              << ")\n";
    TuneOptions tune_options{.shapes = flags.quick ? quick_grid() : std::vector<TuneShape>{},
                             .variants = flags.variants,
                             .warmup = flags.warmup,
                             .repeat = flags.repeat,
                             .save = !flags.dry_run};
    const TuneReport report = tune(context, tune_options);
    Printer printer(std::cout, Format::table);
    for (const TuneResult& r : report.results)
        for (const auto& [variant, ms] : r.timings) {
            Row row;
            row.add("shape", r.shape.describe());
            row.add("variant", variant);
            row.add("median_ms", ms);
            row.add("winner", variant == r.winner ? "*" : "");
            // A variant whose output left the heuristics' choice's: its distance, never the winner.
            std::string agrees = "yes";
            for (const auto& [name, distance] : r.rejected)
                if (name == variant) agrees = "no (" + format_value(distance) + ")";
            row.add("agrees", agrees);
            printer.print(row);
        }
    printer.finish();
    if (!report.table_file.empty()) std::cout << "table: " << report.table_file << '\n';
    else if (!flags.dry_run) std::cout << "no cache directory: the table was used by this run only\n";
    return 0;
}

}  // namespace

Action add_tune(CLI::App& app) {
    auto flags = std::make_shared<TuneFlags>();
    app.add_option("--device", flags->device, "Device index or name substring");
    app.add_flag("--quick", flags->quick, "A small grid of three shapes (seconds on a CPU device) instead of the GPU-sized one");
    app.add_option("--warmup", flags->warmup, "Untimed runs per variant")->capture_default_str()->check(CLI::NonNegativeNumber);
    app.add_option("--repeat", flags->repeat, "Timed runs per variant (the median counts)")->capture_default_str()->check(CLI::PositiveNumber);
    app.add_flag("--dry-run", flags->dry_run, "Time and print, but write no table");
    app.add_option("--variants", flags->variants,
                   "Only these catalogued variants (comma-separated; a catalogue none of whose variants is named times all "
                   "of its own): " + kernel_variant_names() + "; the backward's: " + backward_variant_names())
        ->delimiter(',');
    return [flags] { return tune_command(*flags); };
}

}  // namespace vkattn::tool
