//! Every saved fuzz input, replayed without a fuzzer: each file under `fuzz/corpus/<target>/`
//! and `fuzz/regressions/<target>/` goes to that target's function (`fuzz/targets.rs`, the
//! same code `scripts/fuzz.sh` fuzzes), so a crash once found and fixed stays fixed in a plain
//! `cargo test`. The corpora are minimized (`cargo fuzz cmin`) and capped: at most 200 inputs
//! per target, none over 4 KiB (regressions: any number, up to 64 KiB).

#[path = "../fuzz/targets.rs"]
mod targets;

use std::path::Path;

const MAX_INPUT: u64 = 4 * 1024;
const MAX_INPUTS: usize = 200;
const MAX_REGRESSION: u64 = 64 * 1024;

#[test]
fn every_saved_fuzz_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut fed = 0;
    for (name, target) in targets::TARGETS {
        let mut seen = 0;
        for (dir, cap) in [("corpus", MAX_INPUT), ("regressions", MAX_REGRESSION)] {
            let Ok(entries) = std::fs::read_dir(root.join(dir).join(name)) else {
                continue;
            };
            let entries: Vec<_> = entries.collect();
            assert!(
                dir != "corpus" || entries.len() <= MAX_INPUTS,
                "{name}: {} saved inputs (cap {MAX_INPUTS}: scripts/fuzz.sh keeps 200)",
                entries.len()
            );
            for entry in entries {
                let path = entry.expect("a corpus entry").path();
                let size = path.metadata().expect("a corpus file").len();
                assert!(size <= cap, "{} is {size} bytes", path.display());
                let data = std::fs::read(&path).expect("a corpus file");
                let run = std::panic::catch_unwind(|| target(&data));
                assert!(run.is_ok(), "{name}: {} fails", path.display());
                seen += 1;
            }
        }
        assert!(seen > 0, "no saved input for target {name}");
        fed += seen;
    }
    println!("{fed} saved inputs replayed");
}
