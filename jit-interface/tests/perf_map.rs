//! perf map output, checked with the real `perf record` / `perf report`.

mod perf_support;

use std::process::Command;

use perf_support::*;

/// The host switches the map on through the API; perf names the JIT function from it.
#[test]
fn perf_report_names_the_jit_function_from_the_perf_map() {
    let dir = scratch("map-report");
    if !require_perf(&dir) {
        return;
    }
    let host = host_path();
    let data = dir.join("perf.data");
    let out = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&host)
        .args(["--ms", "400", "--perf-map", "--extra", "20"])
        .current_dir(&dir)
        .output()
        .expect("run perf record");
    let (stdout, stderr) = text(&out);
    assert!(
        out.status.success(),
        "perf record failed: {stderr}\n{stdout}"
    );
    let host = HostReport::parse(&stdout);
    assert!(host.perf_errors.is_empty(), "{:?}", host.perf_errors);

    // The file has exactly one line per registered function, in perf's format.
    let map_path = format!("/tmp/perf-{}.map", host.pid);
    let map = std::fs::read_to_string(&map_path).expect("perf map written by exit");
    let expected: Vec<String> = host
        .functions
        .iter()
        .map(|f| format!("{:x} {:x} {}", f.start, f.size, f.name))
        .collect();
    assert_eq!(host.functions.len(), 22, "2 functions + 20 stubs");
    for line in &expected {
        assert!(
            map.lines().any(|l| l == line),
            "{map_path} lacks `{line}`:\n{map}"
        );
    }
    assert_eq!(map.lines().count(), expected.len(), "{map}");

    let report = perf(
        &["report", "--stdio", "-i", "perf.data", "--sort", "dso,sym"],
        &dir,
    );
    let rows = report_rows(&report);
    println!(
        "{}",
        rows.iter().take(5).copied().collect::<Vec<_>>().join("\n")
    );
    let top = rows.first().expect("perf report has rows");
    assert!(
        top.contains("[JIT] tid") && top.contains("[.] jit_hot_loop"),
        "the hottest symbol should be the JIT loop, named from the map:\n{report}"
    );
    let _ = std::fs::remove_file(&map_path);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `JIT_PERF_MAP=1` switches the map on without any call.
#[test]
fn environment_switches_the_map_on() {
    let out = Command::new(host_path())
        .args(["--ms", "0"])
        .env("JIT_PERF_MAP", "1")
        .env_remove("JIT_DUMP")
        .output()
        .expect("run host");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let host = HostReport::parse(&stdout);
    let map_path = format!("/tmp/perf-{}.map", host.pid);
    let map = std::fs::read_to_string(&map_path).expect("map written at exit");
    let f = host.function("jit_outer");
    assert!(
        map.contains(&format!("{:x} {:x} jit_outer\n", f.start, f.size)),
        "{map}"
    );
    let _ = std::fs::remove_file(&map_path);
}

/// A switch value that is neither 1 nor 0 is reported, once, and registration still works.
#[test]
fn bad_switch_value_is_reported_and_registration_goes_on() {
    let out = Command::new(host_path())
        .args(["--ms", "0"])
        .env("JIT_PERF_MAP", "yes")
        .env_remove("JIT_DUMP")
        .output()
        .expect("run host");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "registration must not fail: {stderr}");
    let msg = "JIT_PERF_MAP=yes is not understood: set it to 1 to switch the output on";
    assert_eq!(stderr.matches(msg).count(), 1, "stderr: {stderr}");
    let host = HostReport::parse(&stdout);
    assert!(
        host.perf_errors.iter().any(|e| e.contains(msg)),
        "{:?}",
        host.perf_errors
    );
    assert!(stdout.contains("result "), "the JIT code ran: {stdout}");
    assert!(!std::path::Path::new(&format!("/tmp/perf-{}.map", host.pid)).exists());
}

/// After `fork`, the child writes its own files and does not repeat what the parent had
/// buffered; the parent's files do not get the child's function.
#[test]
fn forked_child_writes_its_own_files() {
    let dir = scratch("fork");
    let out = Command::new(host_path())
        .args(["--ms", "0", "--fork", "--perf-map", "--jitdump"])
        .arg(&dir)
        .env_remove("JIT_DUMP")
        .env_remove("JIT_PERF_MAP")
        .output()
        .expect("run host");
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    let host = HostReport::parse(&stdout);
    let child: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("child "))
        .expect("child pid")
        .parse()
        .unwrap();
    let parent_map = std::fs::read_to_string(format!("/tmp/perf-{}.map", host.pid)).unwrap();
    let child_map = std::fs::read_to_string(format!("/tmp/perf-{child}.map")).unwrap();
    let names = |m: &str| -> Vec<String> {
        m.lines()
            .map(|l| l.splitn(3, ' ').nth(2).unwrap().to_string())
            .collect()
    };
    assert_eq!(names(&parent_map), ["jit_hot_loop", "jit_outer"]);
    assert_eq!(names(&child_map), ["jit_child"]);
    for pid in [host.pid, child] {
        let dump = std::fs::read(dir.join(format!("jit-{pid}.dump"))).expect("dump per process");
        assert_eq!(
            u32::from_le_bytes(dump[20..24].try_into().unwrap()),
            pid,
            "header pid"
        );
        let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
    }
    let _ = std::fs::remove_dir_all(&dir);
}
