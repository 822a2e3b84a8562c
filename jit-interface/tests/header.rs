//! The committed C header must be exactly what cbindgen generates from `src/capi.rs`.
//! `JIT_UPDATE_HEADER=1 cargo test -p jit-interface --test header` rewrites it.

use std::path::Path;

#[test]
fn c_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config =
        cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("read cbindgen.toml");
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_crate(dir)
        .with_config(config)
        .generate()
        .expect("cbindgen failed")
        .write(&mut generated);
    let generated = String::from_utf8(generated).expect("header is UTF-8");
    let path = dir.join("include/jit_interface.h");
    if std::env::var_os("JIT_UPDATE_HEADER").is_some() {
        std::fs::write(&path, &generated).expect("write header");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} is stale: run scripts/regen-header.sh and commit the result.\n--- generated ---\n{generated}",
        path.display()
    );
}
