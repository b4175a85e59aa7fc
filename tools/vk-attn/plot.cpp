#include "plot.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "vkattn/errors.hpp"

namespace vkattn::tool {
namespace {

constexpr const char* kScript = R"PY(
import csv, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
ceiling = float(sys.argv[3])
series = {}
for r in rows:
    key = f"{r['impl']} {r['dtype']} D={r['dim']}" + (" causal" if r['causal'] == 'true' else "")
    series.setdefault(key, []).append((int(r['seq_q']), float(r['gflops'])))
fig, ax = plt.subplots(figsize=(8, 5))
for key, points in sorted(series.items()):
    points.sort()
    ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=key)
if ceiling > 0:
    ax.axhline(ceiling, color="gray", linestyle="--", label=f"GEMM ceiling {ceiling:.1f}")
ax.set_xscale("log", base=2)
ax.set_xlabel("sequence length")
ax.set_ylabel("GFLOP/s")
ax.set_title(sys.argv[4])
ax.grid(True, alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=100)
)PY";

}  // namespace

void plot_gflops(const std::vector<Row>& rows, const std::string& png, double gemm_gflops) {
    const auto dir = std::filesystem::temp_directory_path() / ("vk-attn-plot-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const auto csv = dir / "points.csv", script = dir / "plot.py";
    {
        std::ofstream out(csv);
        Printer printer(out, Format::csv);
        for (const auto& r : rows) printer.print(r);
    }
    std::ofstream(script) << kScript;
    const std::string command = "python3 " + script.string() + " " + csv.string() + " '" + png + ".tmp.png' " +
                                std::to_string(gemm_gflops) + " 'vk-attn bench' 2>" + (dir / "err.txt").string();
    const int status = std::system(command.c_str());
    std::ifstream err_in(dir / "err.txt");
    std::string err((std::istreambuf_iterator<char>(err_in)), {});
    std::filesystem::remove_all(dir);
    if (status != 0) {
        std::filesystem::remove(png + ".tmp.png");
        const bool missing = err.find("No module named") != std::string::npos || err.find("not found") != std::string::npos;
        throw InvalidArgument("--plot", missing ? "drawing needs python3 with matplotlib (Debian/Ubuntu: apt-get install "
                                                  "python3-matplotlib)."
                                                : "the plotting script failed: " + err.substr(err.rfind('\n', err.size() - 2) + 1));
    }
    std::filesystem::rename(png + ".tmp.png", png);
}

}  // namespace vkattn::tool
