//! `tests/gpu/api_names.txt` (read by the GPU test drivers in Python, which print the
//! names of the APIs in a capture) must list exactly [`Api::ALL`]: a wire API added
//! without it showed up as a bare number in the H100/H200 comparisons.
//! Regenerate: `MEMWATCH_UPDATE_GOLDEN=1 cargo test -p memwatch-wire --test api_names_file`.

use memwatch_wire::Api;
use std::path::PathBuf;

#[test]
fn gpu_driver_api_names_match_the_wire_enum() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/gpu/api_names.txt");
    let want: String = Api::ALL
        .iter()
        .map(|a| format!("{} {}\n", *a as u16, a.name()))
        .collect();
    if std::env::var_os("MEMWATCH_UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &want).expect("write api_names.txt");
    }
    let have = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(
        have,
        want,
        "{} is out of date; regenerate it (see this test's doc)",
        path.display()
    );
}
