//! `kvmeter compare`: its flags (`args::CompareArgs`) checked, the like-with-like check and the
//! files it writes (report::compare does the statistics).

use crate::args::CompareArgs;
use crate::error::EXIT_OK;

pub(super) fn compare(a: CompareArgs) -> anyhow::Result<i32> {
    use crate::error::UsageError;
    use crate::report::compare;
    if !(0.0..1.0).contains(&a.noise) {
        return Err(UsageError::new(format!(
            "--noise {}: expected a share from 0 to 1 (e.g. 0.02)",
            a.noise
        ))
        .into());
    }
    let runs_a = compare::collect(&a.a, "A")?;
    let runs_b = compare::collect(&a.b, "--vs")?;
    let c = compare::compare(&runs_a, &runs_b, a.noise, &a.metric)?;
    // One difference is the variable under test; more than one is not like with like.
    if a.require_match && c.mismatches.len() > 1 {
        return Err(UsageError::new(format!(
            "--require-match: the runs differ in {} fields, not only the one under test: {}",
            c.mismatches.len(),
            c.mismatches.join("; ")
        ))
        .into());
    }
    let out = a
        .out
        .unwrap_or_else(|| crate::plan::default_out("compare", "runs"));
    let out = crate::report::rundir::claim(&out)?;
    match c.mismatches.as_slice() {
        [] => {}
        [one] => {
            errln!("compare: the one difference between the runs (the variable under test): {one}")
        }
        many => {
            for m in many {
                errln!("warning: not like with like: {m}");
            }
        }
    }
    crate::report::rundir::write_atomic(
        &out.join("compare.json"),
        (serde_json::to_string_pretty(&c)? + "\n").as_bytes(),
    )?;
    crate::report::rundir::write_atomic(&out.join("compare.html"), c.html().as_bytes())?;
    out!("{}", c.render());
    // Where both sides were profiled (`--profile`), where their CPU went differently.
    match crate::report::profile::differential(&runs_a, &runs_b, &out) {
        Ok(files) if !files.is_empty() => {
            outln!(
                "differential flame graphs (B against A): {} in {}",
                files.len(),
                out.join("profile-diff").display()
            );
        }
        Ok(_) => {}
        Err(why) => errln!("warning: differential flame graphs: {why}"),
    }
    errln!("results: {}", out.display());
    let why = c.gate_failures();
    if !a.fail_on_regression || why.is_empty() {
        return Ok(EXIT_OK);
    }
    for w in &why {
        errln!("compare: --fail-on-regression: {w}");
    }
    Ok(crate::error::EXIT_FAILED)
}
