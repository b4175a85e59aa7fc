// The tuner's table (tune/table.hpp): buckets, the text format, and which tables a device takes.
#include "support/catch.hpp"

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "fake_devices.hpp"
#include "tune/table.hpp"

using namespace vkattn;
using namespace vkattn::detail;
using namespace vkattn::detail::fake;

TEST_CASE("tuning table: buckets group problems by types, heads, mask kind and lengths by powers of 8",
          "[unit][tuning][table]") {
    const Problem decode = problem(1, 32, 8, 1, 4096, 128, 128, DType::f16);
    CHECK(tuning_bucket(decode) == "q=f16 k=f32 v=f32 dk=128 dv=128 causal=0 group=8 rows=8 keys=4096");
    Problem longer = decode;
    longer.Nkv = 3000;  // the same power of 8
    CHECK(tuning_bucket(longer) == tuning_bucket(decode));
    longer.Nkv = 5000;
    CHECK(tuning_bucket(longer) != tuning_bucket(decode));
    Problem causal = decode;
    causal.causal = Causal::bottom_right;
    CHECK(tuning_bucket(causal) != tuning_bucket(decode));
    Problem huge = decode;
    huge.Nkv = 1 << 20;
    CHECK_THAT(tuning_bucket(huge), Catch::EndsWith("keys=more"));
}

TEST_CASE("tuning table: the text round-trips, and what is not a table is refused with a reason", "[unit][tuning][table]") {
    TuningTable t;
    t.device_uuid = "00ff";
    t.driver = "driver 1.2";
    t.winners["q=f32 k=f32 v=f32 dk=64 dv=64 causal=0 group=1 rows=512 keys=512"] = {"tile", 0.25};
    t.winners["q=f16 k=f16 v=f16 dk=128 dv=128 causal=1 group=8 rows=8 keys=32768"] = {"split-decode", 0.05};
    std::string why;
    const auto back = TuningTable::parse(t.serialize(), &why);
    INFO(why);
    REQUIRE(back);
    CHECK(back->device_uuid == t.device_uuid);
    CHECK(back->driver == t.driver);
    REQUIRE(back->winners.size() == 2);
    CHECK(back->winners.at("q=f32 k=f32 v=f32 dk=64 dv=64 causal=0 group=1 rows=512 keys=512").variant == "tile");
    CHECK(back->winner(problem(1, 8, 8, 300, 300, 64, 64)) != nullptr);
    CHECK(back->winner(problem(1, 8, 8, 300, 300, 80, 80)) == nullptr);
    CHECK(back->backward_winner(problem(1, 8, 8, 300, 300, 64, 64)) == nullptr);  // the forward's bucket only
    // The backward's buckets: its own variants, under "backward " and the forward's bucket.
    const Problem training = problem(1, 8, 8, 300, 300, 64, 64);
    CHECK(backward_tuning_bucket(training) == "backward " + tuning_bucket(training));
    t.winners[backward_tuning_bucket(training)] = {"backward-coopmat", 1.5};
    const auto with_backward = TuningTable::parse(t.serialize(), &why);
    INFO(why);
    REQUIRE(with_backward);
    REQUIRE(with_backward->backward_winner(training));
    CHECK(*with_backward->backward_winner(training) == "backward-coopmat");
    CHECK(*with_backward->winner(training) == "tile");
    std::string refusal;
    CHECK_FALSE(TuningTable::parse("vkattn tuning table 2\ndevice a\ndriver b\nbackward q=f32\ttile\t1\n", &refusal));
    CHECK_THAT(refusal, Catch::Contains("backward's catalogue"));
    CHECK_FALSE(TuningTable::parse("vkattn tuning table 2\ndevice a\ndriver b\nq=f32\tbackward-fused\t1\n", &refusal));
    // Version 1 (forward winners only) still loads.
    CHECK(TuningTable::parse("vkattn tuning table 1\ndevice a\ndriver b\nbucket\ttile\t1\n", &why));
    for (const std::string bad : {"", "vkattn tuning table 3\ndevice a\ndriver b\n", "vkattn tuning table 1\ndriver b\n",
                                  "vkattn tuning table 1\ndevice a\ndriver b\nbucket\tnot-a-variant\t1\n",
                                  "vkattn tuning table 1\ndevice a\ndriver b\nbucket\ttile\tfast\n",
                                  "vkattn tuning table 1\ndevice a\ndriver b\nbucket only\n"}) {
        std::string reason;
        CHECK_FALSE(TuningTable::parse(bad, &reason));
        CHECK_FALSE(reason.empty());
    }
}

TEST_CASE("tuning table: a device takes only its own table, measured with its driver", "[unit][tuning][table]") {
    const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("vkattn-table-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    TuningTable t;
    t.device_uuid = "abcd";
    t.driver = "d1";
    t.winners["b"] = {"tile", 1.0};
    const auto file = tuning_table_file(dir, "abcd");
    std::ofstream(file) << t.serialize();
    std::string why;
    CHECK(load_tuning_table(file, "abcd", "d1"));
    CHECK_FALSE(load_tuning_table(file, "abcd", "d2", &why));  // another driver
    CHECK_THAT(why, Catch::Contains("driver d1"));
    CHECK_FALSE(load_tuning_table(file, "ef01", "d1"));  // another device
    CHECK_FALSE(load_tuning_table(dir / "missing.txt", "abcd", "d1", &why));
    CHECK_THAT(why, Catch::Contains("no table"));
    std::filesystem::remove_all(dir);
}
