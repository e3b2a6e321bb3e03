//! An agent's index and count, from its flags or from the engine that placed it: a Kubernetes
//! Indexed Job sets `JOB_COMPLETION_INDEX` (the count is the Job's `completions`, so it comes
//! from the plan), Slurm `SLURM_PROCID`/`SLURM_NTASKS`, Open MPI
//! `OMPI_COMM_WORLD_RANK`/`OMPI_COMM_WORLD_SIZE`. kvmeter never places agents itself.

use crate::error::UsageError;

#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    pub index: usize,
    /// `None`: take the plan's agent count.
    pub count: Option<usize>,
    /// `--index` or the variable the index came from.
    pub source: String,
}

/// The engines' variables, in the order they are looked for: (index, count).
const ENGINES: [(&str, Option<&str>); 3] = [
    ("JOB_COMPLETION_INDEX", None),
    ("SLURM_PROCID", Some("SLURM_NTASKS")),
    ("OMPI_COMM_WORLD_RANK", Some("OMPI_COMM_WORLD_SIZE")),
];

fn number(name: &str, v: &str) -> Result<usize, UsageError> {
    v.trim()
        .parse::<usize>()
        .map_err(|_| UsageError::new(format!("{name}='{v}': expected a whole number ≥ 0")))
}

/// From `--index`/`--count`, else from `env` (a lookup, so tests need not touch the process
/// environment).
pub fn resolve(
    index: Option<usize>,
    count: Option<usize>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Placement, UsageError> {
    let p = match index {
        Some(i) => Placement {
            index: i,
            count,
            source: "--index".into(),
        },
        None => {
            let found = ENGINES
                .iter()
                .find_map(|(i, c)| env(i).map(|v| (*i, v, *c)));
            let Some((name, v, count_var)) = found else {
                return Err(UsageError::new(
                    "kvmeter agent: no index: give --index I (and --count N), or run it under a Kubernetes Indexed Job (JOB_COMPLETION_INDEX), Slurm (SLURM_PROCID) or MPI (OMPI_COMM_WORLD_RANK)",
                ));
            };
            let from_env = match count_var.and_then(|c| env(c).map(|v| (c, v))) {
                Some((c, v)) => Some(number(c, &v)?),
                None => None,
            };
            Placement {
                index: number(name, &v)?,
                count: count.or(from_env),
                source: name.to_string(),
            }
        }
    };
    if p.count == Some(0) {
        return Err(UsageError::new("--count 0: expected at least one agent"));
    }
    if let Some(c) = p.count.filter(|c| p.index >= *c) {
        return Err(UsageError::new(format!(
            "{} {}: out of range for {c} agents (0..{})",
            p.source,
            p.index,
            c - 1
        )));
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn each_engine_places_an_agent() {
        let k8s = resolve(None, None, env(&[("JOB_COMPLETION_INDEX", "2")])).unwrap();
        assert_eq!((k8s.index, k8s.count), (2, None));
        assert_eq!(k8s.source, "JOB_COMPLETION_INDEX");
        let slurm = resolve(
            None,
            None,
            env(&[("SLURM_PROCID", "1"), ("SLURM_NTASKS", "4")]),
        )
        .unwrap();
        assert_eq!((slurm.index, slurm.count), (1, Some(4)));
        let mpi = resolve(
            None,
            None,
            env(&[("OMPI_COMM_WORLD_RANK", "3"), ("OMPI_COMM_WORLD_SIZE", "4")]),
        )
        .unwrap();
        assert_eq!((mpi.index, mpi.count), (3, Some(4)));
        // Flags win over the environment.
        let flag = resolve(Some(0), Some(2), env(&[("SLURM_PROCID", "1")])).unwrap();
        assert_eq!(
            (flag.index, flag.count, flag.source.as_str()),
            (0, Some(2), "--index")
        );
    }

    #[test]
    fn bad_placement_is_one_line() {
        let e = resolve(None, None, env(&[])).unwrap_err().0;
        assert!(e.contains("no index"), "{e}");
        let e = resolve(None, None, env(&[("SLURM_PROCID", "x")]))
            .unwrap_err()
            .0;
        assert_eq!(e, "SLURM_PROCID='x': expected a whole number ≥ 0");
        let e = resolve(
            None,
            None,
            env(&[("SLURM_PROCID", "4"), ("SLURM_NTASKS", "4")]),
        )
        .unwrap_err()
        .0;
        assert_eq!(e, "SLURM_PROCID 4: out of range for 4 agents (0..3)");
    }
}
