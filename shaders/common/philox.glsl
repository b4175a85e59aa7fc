// Philox 4×32-10, the GPU twin of engine/include/vkattn/dropout.hpp: dropout's random numbers, one
// counter per attention weight (key j, query row i, query head h, batch b), keyed by the seed.
#ifndef VKATTN_PHILOX_GLSL
#define VKATTN_PHILOX_GLSL

uvec4 philox4x32_10(uvec4 counter, uvec2 key) {
    for (int round = 0; round < 10; ++round) {
        uint hi0, lo0, hi1, lo1;
        umulExtended(0xD2511F53u, counter.x, hi0, lo0);
        umulExtended(0xCD9E8D57u, counter.z, hi1, lo1);
        counter = uvec4(hi1 ^ counter.y ^ key.x, lo1, hi0 ^ counter.w ^ key.y, lo0);
        key += uvec2(0x9E3779B9u, 0xBB67AE85u);
    }
    return counter;
}

// Whether weight (b, h, i, j) survives dropout (P.mask.drop_threshold, P.mask.seed: MaskParams),
// numbered as in the whole attention that this call may be a block of (P.mask.origin).
bool dropout_keeps(uint b, uint h, uint i, uint j) {
    const uvec4 o = P.mask.origin;
    return philox4x32_10(uvec4(j + o.w, i + o.z, h + o.y, b + o.x), P.mask.seed).x >= P.mask.drop_threshold;
}

#endif
