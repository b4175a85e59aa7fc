#include "plot.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
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
    // $VKATTN_PYTHON, else the python3 on PATH, else the system's: a pyenv or virtualenv python3
    // first on PATH often lacks the distribution's python3-matplotlib.
    std::vector<std::string> pythons;
    if (const char* chosen = std::getenv("VKATTN_PYTHON")) pythons.emplace_back(chosen);
    pythons.emplace_back("python3");
    if (std::filesystem::exists("/usr/bin/python3")) pythons.emplace_back("/usr/bin/python3");
    int status = -1;
    std::string err;
    for (const auto& python : pythons) {
        const std::string command = python + " " + script.string() + " " + csv.string() + " '" + png + ".tmp.png' " +
                                    std::to_string(gemm_gflops) + " 'vk-attn bench' 2>" + (dir / "err.txt").string();
        status = std::system(command.c_str());
        std::ifstream err_in(dir / "err.txt");
        err.assign((std::istreambuf_iterator<char>(err_in)), {});
        if (status == 0 || err.find("No module named") == std::string::npos) break;  // only a missing module retries
    }
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
