// Catch2 behind one include: version 2 (Debian 12's single header) or 3 (Debian 13's and Ubuntu
// 24.04's library), so the suite builds with either. Version 3 renamed what the suite spells in
// version 2's words; they are restored here: Catch::Contains (a string's substring; version 3's
// Matchers::Contains matches a range's element instead), StartsWith, EndsWith, Matches, and Approx
// at global scope.
#pragma once

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>

#include <string>

namespace Catch {
inline Matchers::StringContainsMatcher Contains(const std::string& text, CaseSensitive sensitivity = CaseSensitive::Yes) {
    return Matchers::ContainsSubstring(text, sensitivity);
}
using Matchers::EndsWith;
using Matchers::Matches;
using Matchers::StartsWith;
}  // namespace Catch
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif
