//! Shared by the perf tests: build and run the JIT host (`examples/perf_host.rs`), run the
//! real `perf`, and read what the host says it registered.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `target/debug` (or `target/release`) of this test binary.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    exe.parent()
        .and_then(Path::parent)
        .expect("test executable lives in target/<profile>/deps")
        .to_path_buf()
}

/// Builds the perf host and the C library with cargo (nothing to do when they are fresh:
/// `cargo test --test X` alone does not build examples or the staticlib).
pub fn build_artifacts() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "-q",
        "-p",
        "jit-interface",
        "--lib",
        "--example",
        "perf_host",
    ]);
    if profile_dir().file_name().is_some_and(|n| n == "release") {
        cmd.arg("--release");
    }
    let out = cmd.output().expect("run cargo build");
    assert!(
        out.status.success(),
        "cargo build of the perf host failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn host_path() -> PathBuf {
    build_artifacts();
    profile_dir().join("examples/perf_host")
}

/// A fresh empty directory for one test's files.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("jit-perf-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

pub fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Whether `perf record` works here; `Err` says exactly why not. Tests print the reason and
/// stop (pass) unless `JIT_REQUIRE_PERF=1`, which makes them fail instead.
pub fn perf_usable(dir: &Path) -> Result<(), String> {
    let data = dir.join("probe.data");
    let out = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-k", "mono", "-o"])
        .arg(&data)
        .args(["--", "true"])
        .output()
        .map_err(|e| format!("cannot run `perf` ({e}): install linux-perf"))?;
    if out.status.success() {
        return Ok(());
    }
    let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .unwrap_or_else(|e| format!("unreadable ({e})"));
    Err(format!(
        "`perf record -e cpu-clock -k mono -- true` failed ({}; perf_event_paranoid = {}): {}",
        out.status,
        paranoid.trim(),
        String::from_utf8_lossy(&out.stderr).trim()
    ))
}

/// Calls [`perf_usable`]; returns false (after printing why) if the test must stop.
pub fn require_perf(dir: &Path) -> bool {
    match perf_usable(dir) {
        Ok(()) => true,
        Err(why) => {
            assert!(
                std::env::var_os("JIT_REQUIRE_PERF").is_none(),
                "perf is required (JIT_REQUIRE_PERF is set) but unusable: {why}"
            );
            eprintln!("SKIPPED: perf cannot sample in this environment: {why}");
            false
        }
    }
}

/// Runs perf with `args`, asserting success; returns stdout.
pub fn perf(args: &[&str], cwd: &Path) -> String {
    let out = Command::new("perf")
        .args(args)
        .current_dir(cwd)
        .output()
        .expect("run perf");
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "perf {} failed ({}):\n{stderr}\n{stdout}",
        args.join(" "),
        out.status
    );
    stdout
}

/// What the host printed about one registered function.
#[derive(Debug, Clone)]
pub struct HostFunction {
    pub name: String,
    pub start: u64,
    pub size: u64,
    /// (offset, line, file)
    pub lines: Vec<(u64, u32, String)>,
}

/// Parsed stdout of the host.
#[derive(Debug, Default)]
pub struct HostReport {
    pub pid: u32,
    pub functions: Vec<HostFunction>,
    /// (function, start offset, end offset) of the hot loop.
    pub loop_range: Option<(String, u64, u64)>,
    pub perf_errors: Vec<String>,
}

impl HostReport {
    pub fn parse(stdout: &str) -> HostReport {
        let mut r = HostReport::default();
        for l in stdout.lines() {
            let w: Vec<&str> = l.split(' ').collect();
            match w.as_slice() {
                ["pid", p] => r.pid = p.parse().unwrap(),
                ["function", name, start, size] => r.functions.push(HostFunction {
                    name: name.to_string(),
                    start: u64::from_str_radix(start.trim_start_matches("0x"), 16).unwrap(),
                    size: size.parse().unwrap(),
                    lines: Vec::new(),
                }),
                ["line", name, off, line, file] => {
                    let f = r
                        .functions
                        .iter_mut()
                        .find(|f| f.name == *name)
                        .expect("line of a printed function");
                    f.lines.push((
                        off.parse().unwrap(),
                        line.parse().unwrap(),
                        file.to_string(),
                    ));
                }
                ["loop", name, a, b] => {
                    r.loop_range = Some((name.to_string(), a.parse().unwrap(), b.parse().unwrap()))
                }
                ["perf-error", ..] => r.perf_errors.push(l["perf-error ".len()..].to_string()),
                _ => {}
            }
        }
        r
    }

    pub fn function(&self, name: &str) -> &HostFunction {
        self.functions
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("the host did not register {name}"))
    }

    /// The source line the host registered for the hot loop's first instruction.
    pub fn loop_line(&self) -> (String, u32) {
        let (name, start, _) = self.loop_range.clone().expect("host printed its loop");
        let f = self.function(&name);
        let (_, line, file) = f
            .lines
            .iter()
            .rev()
            .find(|(off, _, _)| *off <= start)
            .expect("a line row covers the loop")
            .clone();
        (file, line)
    }
}

/// The rows of `perf report --stdio` output without comments and blank lines.
pub fn report_rows(report: &str) -> Vec<&str> {
    report
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect()
}
