// Process exit codes. Documented in README.md ("Exit codes") and docs/schema.md; keep them in
// step.
#pragma once

namespace zob::exit_code {
inline constexpr int ok = 0;
inline constexpr int arm_failed = 1;           // an arm failed, or the arms disagree
inline constexpr int usage = 2;                // invalid input or a pre-flight refusal; nothing ran
inline constexpr int backend_unavailable = 3;  // requested backend not usable on this machine
inline constexpr int hung_up = 129;            // SIGHUP (128 + 1)
inline constexpr int interrupted = 130;        // SIGINT (128 + 2)
inline constexpr int terminated = 143;         // SIGTERM (128 + 15)
}  // namespace zob::exit_code
