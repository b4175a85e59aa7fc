// flash_coopmat.comp's O: OTR = OT · RT accumulators ordered [column tile][row tile], and what each
// phase does to them, included at global scope after its tiles. O_TILES(X) applies a phase to every
// accumulator; the phases' macros expand inside main and name its locals: factors and
// factors_bottom (the rescale's row factors, the second row tile's), kt, p_op, p_bottom and v_op
// (P·V's key block, P's operands for each row tile and the column tile's V operand, loaded once
// for its RT products), and the finish's s_base, part, local_row, row_stored, row_loud, row_factor
// and o_row. Every branch is on constants (f, RT, OTR) or uniform values (col_base, Dv).
#ifndef VKATTN_COOPMAT_O_TILES_GLSL
#define VKATTN_COOPMAT_O_TILES_GLSL

// X(acc, f) for each of O's OTR accumulators (f: column tile f / RT, row tile f % RT): elements
// of an array, or with O_NAMED the first OTR of eight named matrices, which no driver can index at
// run time. NVIDIA's compiler kept the array in local memory (exactly its size, at every head size
// and register count measured); named, O stays in registers (H200, session 25). X's body tests
// f < OTR itself (a constant).
#define O_TILES(X)                                                                       \
    if (O_NAMED) {                                                                       \
        X(o0, 0u) X(o1, 1u) X(o2, 2u) X(o3, 3u) X(o4, 4u) X(o5, 5u) X(o6, 6u) X(o7, 7u) \
    } else {                                                                             \
        CM_LOOP for (uint f = 0u; f < OTR; ++f) { X(o[f], f) }                           \
    }

// Zero at the start.
#define O_FILL(acc, f) \
    if (f < OTR) CM_FILL(acc, 0.0);

// Rows whose maximum moved: each element times its row's factor.
#define O_RESCALE(acc, f)                         \
    if (f < OTR) {                                \
        if (f % RT == 0u) {                       \
            CM_MUL_ELEMENTS(acc, factors);        \
        } else {                                  \
            CM_MUL_ELEMENTS(acc, factors_bottom); \
        }                                         \
    }

// O += P·V for key block kt, V from v_tile (KV_APART) or kv_tile; a pass's last column tiles may lie
// past Dv.
#define O_PV(acc, f)                                                                   \
    if (f < OTR && col_base + 16u * (f / RT) < Dv) {                                   \
        if (f % RT == 0u) {                                                            \
            if (KV_APART) {                                                            \
                CM_LOAD_B(v_op, v_tile, 16u * kt * PITCH_V + 16u * (f / RT), PITCH_V); \
            } else {                                                                   \
                CM_LOAD_B(v_op, kv_tile, 16u * kt * PITCH_KV + 16u * (f / RT), PITCH_KV); \
            }                                                                          \
            O_PV_ADD(acc, p_op);                                                       \
        } else {                                                                       \
            O_PV_ADD(acc, p_bottom);                                                   \
        }                                                                              \
    }
// acc += p·v_op, v_op from V's tile (the portable B refers to it by name).
#define O_PV_ADD(acc, p)                           \
    if (KV_APART) {                                \
        CM_MUL_ADD(acc, p, v_op, v_tile);          \
    } else {                                       \
        CM_MUL_ADD(acc, p, v_op, kv_tile);         \
    }

// The end, through the subgroup's S tile, normalised. Each column tile: every lane has read the
// previous one (and the last scores) before its RT row tiles are stored; the lanes read their rows
// once all are.
#define O_OUT(acc, f)                                                                                       \
    if (f < OTR && col_base + 16u * (f / RT) < Dv) {                                                        \
        if (f % RT == 0u) CM_SUBGROUP_SYNC();                                                               \
        CM_STORE(acc, s_tile, s_base + 16u * (f % RT) * PITCH_S, PITCH_S);                                  \
        if (f % RT == RT - 1u) {                                                                            \
            CM_SUBGROUP_SYNC();                                                                             \
            [[unroll]] for (uint t = 0u; t < SROWS; ++t)                                                    \
                [[unroll]] for (uint c = 0u; c < SCOLS; ++c) {                                              \
                    const uint col = col_base + 16u * (f / RT) + part * SCOLS + c;                          \
                    const float value = CM_AT(s_tile, s_base + local_row[t] * PITCH_S + part * SCOLS + c);  \
                    if (row_stored[t] && col < Dv) store_out(o_row[t] + col, row_loud[t] ? quiet_nan() : value * row_factor[t]); \
                }                                                                                           \
        }                                                                                                   \
    }

#endif  // VKATTN_COOPMAT_O_TILES_GLSL
