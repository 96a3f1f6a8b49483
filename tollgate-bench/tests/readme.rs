//! The README's `tollgate-bench` section names exactly the flags the binary takes.

use std::collections::BTreeSet;

use clap::{CommandFactory, Parser};
use tollgate_bench::BenchArgs;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: BenchArgs,
}

#[test]
fn the_readme_section_names_every_flag_and_no_other() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let start = readme.find("### `tollgate-bench`").expect("bench section");
    let end = start + 3 + readme[start + 3..].find("\n##").expect("section end");
    let section = &readme[start..end];
    let documented: BTreeSet<String> = section
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2)
        .map(|w| w.trim_end_matches('-').to_string())
        .filter(|w| !["--release", "--workspace", "--bench"].contains(&w.as_str()))
        .collect();
    let flags: BTreeSet<String> = Cli::command()
        .get_arguments()
        .filter_map(|a| a.get_long())
        .map(|l| format!("--{l}"))
        .collect();
    assert_eq!(documented, flags);
}
