//! The `tollgate-bench` section of docs/cli.md names exactly the flags the binary takes.

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
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md"))
        .expect("docs/cli.md");
    let start = docs.find("## `tollgate-bench`").expect("bench section");
    let end = docs[start + 3..]
        .find("\n## ")
        .map_or(docs.len(), |e| start + 3 + e);
    let section = &docs[start..end];
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
