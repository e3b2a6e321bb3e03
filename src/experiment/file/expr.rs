//! The small arithmetic a finding or figure computes from the results: numbers, references to
//! a step's figures (`{step:key}`, `*` matching any run of characters in the key, e.g.
//! `{threads:*/run.throughput_ops_per_s}` over a sweep's points), + − × ÷, parentheses, and
//! max, min, mean, first, last, count over references that match several figures.
//!
//! Written by hand (a recursive-descent parser of ~150 lines) because the references are the
//! point: each must be checked against the experiment's steps when the file is read, with the
//! file's line, and an estimate (energy from a model, not a meter) must stay labelled through
//! the arithmetic; general expression crates give neither without wrapping every value.
//!
//! Every value also carries the interval its true value lies in, with the reasons: a capacity
//! search that stopped with every rate passing gives only "≥ X" ([X, ∞)), the spread of a
//! sweep point's repeats or the disagreement of two identical steps widens a figure to what
//! kvmeter can tell apart. The interval goes through the arithmetic (interval arithmetic:
//! each operation gives the smallest interval holding every result of its inputs' intervals),
//! so a finding can say whether its comparison holds for the whole interval, for none of it,
//! or cannot be decided (findings.rs).

use std::fmt;

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    Num(f64),
    Ref { step: String, key: String },
    Neg(Box<Expr>),
    Bin(Box<Expr>, char, Box<Expr>),
    Call(String, Vec<Expr>),
}

pub const FUNCTIONS: [&str; 6] = ["max", "min", "mean", "first", "last", "count"];

/// A computed figure: its value, whether any input was an estimate, and the interval
/// `[lo, hi]` its true value lies in (both `v` for an exact figure; ±∞ for an open side) with
/// why it is wider than the value (one sentence per input that widened it).
#[derive(Clone, Debug, PartialEq)]
pub struct Val {
    pub v: f64,
    pub estimate: bool,
    pub lo: f64,
    pub hi: f64,
    pub why: Vec<String>,
}

impl Val {
    pub fn exact(v: f64, estimate: bool) -> Self {
        Val {
            v,
            estimate,
            lo: v,
            hi: v,
            why: vec![],
        }
    }

    /// Is the true value this value (no bound, no noise)?
    pub fn is_exact(&self) -> bool {
        self.lo == self.v && self.hi == self.v
    }

    /// Combines the labels of two inputs into a result with value `v` and interval `lo..hi`.
    fn join(a: &Val, b: &Val, v: f64, (lo, hi): (f64, f64)) -> Val {
        let mut why = a.why.clone();
        why.extend(b.why.iter().filter(|w| !a.why.contains(w)).cloned());
        Val {
            v,
            estimate: a.estimate || b.estimate,
            lo,
            hi,
            why,
        }
    }
}

/// A product where 0 × ∞ is 0: an exact zero times an unbounded side is still zero.
fn mul0(a: f64, b: f64) -> f64 {
    if a == 0.0 || b == 0.0 {
        0.0
    } else {
        a * b
    }
}

/// The interval of `a op b` over every pair of values from the two intervals.
fn interval(a: (f64, f64), op: char, b: (f64, f64)) -> (f64, f64) {
    let span = |xs: [f64; 4]| {
        (
            xs.iter().copied().fold(f64::INFINITY, f64::min),
            xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        )
    };
    match op {
        '+' => (a.0 + b.0, a.1 + b.1),
        '-' => (a.0 - b.1, a.1 - b.0),
        '*' => span([
            mul0(a.0, b.0),
            mul0(a.0, b.1),
            mul0(a.1, b.0),
            mul0(a.1, b.1),
        ]),
        _ => {
            // A divisor that may be zero leaves the quotient unbounded on both sides.
            if b.0 <= 0.0 && b.1 >= 0.0 {
                (f64::NEG_INFINITY, f64::INFINITY)
            } else {
                interval(a, '*', (1.0 / b.1, 1.0 / b.0))
            }
        }
    }
}

/// What an expression reads its references from.
pub trait Lookup {
    /// Every figure of `step` whose key matches `pattern` (`*` = any characters), in the
    /// step's order; an empty list or an error says why nothing is there.
    fn find(&self, step: &str, pattern: &str) -> Result<Vec<Val>, String>;
}

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Expr::Num(n) => write!(f, "{n}"),
            Expr::Ref { step, key } => write!(f, "{{{step}:{key}}}"),
            Expr::Neg(e) => write!(f, "-{e}"),
            Expr::Bin(a, op, b) => write!(f, "({a} {op} {b})"),
            Expr::Call(name, args) => {
                write!(f, "{name}(")?;
                for (i, a) in args.iter().enumerate() {
                    if i > 0 {
                        write!(f, ", ")?;
                    }
                    write!(f, "{a}")?;
                }
                write!(f, ")")
            }
        }
    }
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.i).copied()
    }
    fn fail<T>(&self, what: &str) -> Result<T, String> {
        Err(format!("{what} at character {}", self.i + 1))
    }
    fn expr(&mut self) -> Result<Expr, String> {
        let mut e = self.term()?;
        while let Some(c @ (b'+' | b'-')) = self.peek() {
            self.i += 1;
            e = Expr::Bin(Box::new(e), c as char, Box::new(self.term()?));
        }
        Ok(e)
    }
    fn term(&mut self) -> Result<Expr, String> {
        let mut e = self.factor()?;
        while let Some(c @ (b'*' | b'/')) = self.peek() {
            self.i += 1;
            e = Expr::Bin(Box::new(e), c as char, Box::new(self.factor()?));
        }
        Ok(e)
    }
    fn factor(&mut self) -> Result<Expr, String> {
        match self.peek() {
            Some(b'-') => {
                self.i += 1;
                Ok(Expr::Neg(Box::new(self.factor()?)))
            }
            Some(b'(') => {
                self.i += 1;
                let e = self.expr()?;
                if self.peek() != Some(b')') {
                    return self.fail("expected ')'");
                }
                self.i += 1;
                Ok(e)
            }
            Some(b'{') => {
                let start = self.i + 1;
                let Some(end) = self.s[start..].iter().position(|c| *c == b'}') else {
                    return self.fail("'{' without '}'");
                };
                let inner = String::from_utf8_lossy(&self.s[start..start + end]).to_string();
                let Some((step, key)) = inner.split_once(':') else {
                    return self.fail("expected {step:key}");
                };
                if step.trim().is_empty() || key.trim().is_empty() {
                    return self.fail("expected {step:key}");
                }
                self.i = start + end + 1;
                Ok(Expr::Ref {
                    step: step.trim().to_string(),
                    key: key.trim().to_string(),
                })
            }
            Some(c) if c.is_ascii_digit() || c == b'.' => {
                let start = self.i;
                while self.i < self.s.len()
                    && (self.s[self.i].is_ascii_alphanumeric() || b".+-".contains(&self.s[self.i]))
                {
                    // An exponent's sign belongs to the number; any other sign ends it.
                    if b"+-".contains(&self.s[self.i]) && !matches!(self.s[self.i - 1], b'e' | b'E')
                    {
                        break;
                    }
                    self.i += 1;
                }
                let t = String::from_utf8_lossy(&self.s[start..self.i]);
                t.parse::<f64>()
                    .map(Expr::Num)
                    .or_else(|_| self.fail(&format!("'{t}' is not a number")))
            }
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.i;
                while self.i < self.s.len() && self.s[self.i].is_ascii_alphanumeric() {
                    self.i += 1;
                }
                let name = String::from_utf8_lossy(&self.s[start..self.i]).to_string();
                if !FUNCTIONS.contains(&name.as_str()) {
                    self.i = start;
                    return self.fail(&format!(
                        "unknown function '{name}' (known: {})",
                        FUNCTIONS.join(", ")
                    ));
                }
                if self.peek() != Some(b'(') {
                    return self.fail(&format!("expected '(' after {name}"));
                }
                self.i += 1;
                let mut args = vec![self.expr()?];
                while self.peek() == Some(b',') {
                    self.i += 1;
                    args.push(self.expr()?);
                }
                if self.peek() != Some(b')') {
                    return self.fail("expected ')'");
                }
                self.i += 1;
                Ok(Expr::Call(name, args))
            }
            Some(c) => self.fail(&format!("unexpected '{}'", c as char)),
            None => self.fail("unexpected end"),
        }
    }
}

pub fn parse(text: &str) -> Result<Expr, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
    };
    let e = p.expr()?;
    if p.peek().is_some() {
        return p.fail("unexpected text");
    }
    Ok(e)
}

impl Expr {
    /// Every reference, for checking against the experiment's steps.
    pub fn refs(&self) -> Vec<(&str, &str)> {
        match self {
            Expr::Num(_) => vec![],
            Expr::Ref { step, key } => vec![(step, key)],
            Expr::Neg(e) => e.refs(),
            Expr::Bin(a, _, b) => [a.refs(), b.refs()].concat(),
            Expr::Call(_, args) => args.iter().flat_map(|a| a.refs()).collect(),
        }
    }

    /// The values: one for a plain expression, several for a wildcard reference on its own.
    fn values(&self, l: &dyn Lookup) -> Result<Vec<Val>, String> {
        match self {
            Expr::Ref { step, key } => {
                let v = l.find(step, key)?;
                if v.is_empty() {
                    return Err(format!("{{{step}:{key}}}: not in the results"));
                }
                Ok(v)
            }
            Expr::Call(name, args) => {
                let mut all = vec![];
                for a in args {
                    all.extend(a.values(l)?);
                }
                let est = all.iter().any(|v| v.estimate);
                let n = all.len() as f64;
                // Each function is monotone in every input: its interval is the function of
                // the low ends and of the high ends.
                let f = |pick: fn(&Val) -> f64| -> Option<f64> {
                    let xs = all.iter().map(pick);
                    Some(match name.as_str() {
                        "max" => xs.fold(f64::NEG_INFINITY, f64::max),
                        "min" => xs.fold(f64::INFINITY, f64::min),
                        "mean" => xs.sum::<f64>() / n,
                        _ => return None,
                    })
                };
                let mut why: Vec<String> = vec![];
                let mut widen = |x: &Val| {
                    for w in &x.why {
                        if !why.contains(w) {
                            why.push(w.clone());
                        }
                    }
                };
                let out = match name.as_str() {
                    "first" => all[0].clone(),
                    "last" => all[all.len() - 1].clone(),
                    "count" => Val::exact(n, false),
                    _ => {
                        let (Some(v), Some(lo), Some(hi)) = (f(|x| x.v), f(|x| x.lo), f(|x| x.hi))
                        else {
                            return Err(format!("unknown function {name}"));
                        };
                        all.iter().for_each(&mut widen);
                        Val {
                            v,
                            estimate: est,
                            lo,
                            hi,
                            why,
                        }
                    }
                };
                Ok(vec![Val {
                    estimate: est,
                    ..out
                }])
            }
            _ => Ok(vec![self.eval(l)?]),
        }
    }

    pub fn eval(&self, l: &dyn Lookup) -> Result<Val, String> {
        match self {
            Expr::Num(n) => Ok(Val::exact(*n, false)),
            Expr::Ref { step, key } => {
                let v = self.values(l)?;
                if v.len() > 1 {
                    return Err(format!(
                        "{{{step}:{key}}} matches {} figures: wrap it in max(), min(), mean(), first() or last()",
                        v.len()
                    ));
                }
                Ok(v[0].clone())
            }
            Expr::Call(..) => Ok(self.values(l)?.swap_remove(0)),
            Expr::Neg(e) => {
                let v = e.eval(l)?;
                Ok(Val {
                    v: -v.v,
                    lo: -v.hi,
                    hi: -v.lo,
                    ..v
                })
            }
            Expr::Bin(a, op, b) => {
                let (x, y) = (a.eval(l)?, b.eval(l)?);
                let v = match op {
                    '+' => x.v + y.v,
                    '-' => x.v - y.v,
                    '*' => x.v * y.v,
                    _ => x.v / y.v,
                };
                if !v.is_finite() {
                    return Err(format!("{self} is not a finite number"));
                }
                // Exact inputs give an exact result (the interval's own rounding, e.g.
                // a × (1 / b) against a / b, must not make it look uncertain).
                if x.is_exact() && y.is_exact() {
                    return Ok(Val::join(&x, &y, v, (v, v)));
                }
                let (lo, hi) = interval((x.lo, x.hi), *op, (y.lo, y.hi));
                Ok(Val::join(&x, &y, v, (lo.min(v), hi.max(v))))
            }
        }
    }
}

/// Does `key` match `pattern`, where `*` stands for any run of characters?
pub fn matches(pattern: &str, key: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == key;
    }
    let mut rest = key;
    for (i, p) in parts.iter().enumerate() {
        if i == 0 {
            let Some(r) = rest.strip_prefix(p) else {
                return false;
            };
            rest = r;
        } else if i == parts.len() - 1 {
            return rest.ends_with(p);
        } else {
            let Some(at) = rest.find(p) else {
                return false;
            };
            rest = &rest[at + p.len()..];
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Table(Vec<(&'static str, &'static str, f64, bool)>);
    impl Lookup for Table {
        fn find(&self, step: &str, pattern: &str) -> Result<Vec<Val>, String> {
            Ok(self
                .0
                .iter()
                .filter(|(s, k, _, _)| *s == step && matches(pattern, k))
                .map(|(_, _, v, e)| Val::exact(*v, *e))
                .collect())
        }
    }

    fn t() -> Table {
        Table(vec![
            ("rf", "replicas=0/run.tput", 100.0, false),
            ("rf", "replicas=3/run.tput", 32.0, false),
            ("s", "run-c.ops_per_joule", 50.0, true),
        ])
    }

    #[test]
    fn arithmetic_with_precedence_and_references() {
        let e = parse("1 - {rf:replicas=3/run.tput} / {rf:replicas=0/run.tput}").unwrap();
        let v = e.eval(&t()).unwrap();
        assert!((v.v - 0.68).abs() < 1e-12, "{v:?}");
        assert!(!v.estimate);
        assert_eq!(parse("2 + 3 * -2").unwrap().eval(&t()).unwrap().v, -4.0);
        assert_eq!(parse("(2 + 3) * 2e1").unwrap().eval(&t()).unwrap().v, 100.0);
    }

    #[test]
    fn wildcards_need_a_function_and_estimates_stay_labelled() {
        let e = parse("{rf:*/run.tput}").unwrap();
        assert!(e.eval(&t()).unwrap_err().contains("matches 2 figures"));
        assert_eq!(
            parse("max({rf:*/run.tput})").unwrap().eval(&t()).unwrap().v,
            100.0
        );
        assert_eq!(
            parse("last({rf:*/run.tput}) / first({rf:*/run.tput})")
                .unwrap()
                .eval(&t())
                .unwrap()
                .v,
            0.32
        );
        assert_eq!(parse("count({rf:*})").unwrap().eval(&t()).unwrap().v, 2.0);
        let v = parse("{s:run-c.ops_per_joule} * 2")
            .unwrap()
            .eval(&t())
            .unwrap();
        assert!(v.estimate && v.v == 100.0);
    }

    #[test]
    fn bad_expressions_say_where() {
        assert_eq!(parse("1 + (2").unwrap_err(), "expected ')' at character 7");
        assert!(parse("sqrt(2)")
            .unwrap_err()
            .contains("unknown function 'sqrt'"));
        assert!(parse("{nokey}")
            .unwrap_err()
            .contains("expected {step:key}"));
        assert!(parse("{a:b} / {a:c}")
            .unwrap()
            .eval(&t())
            .unwrap_err()
            .contains("not in the results"));
        assert_eq!(
            parse("{rf:x} + max({s:*})").unwrap().refs(),
            vec![("rf", "x"), ("s", "*")]
        );
    }

    /// 0.855 / 1 computed as 0.855 × (1 / 1) is the same number, but x / y as x × (1 / y)
    /// is not always: exact inputs must stay exact.
    #[test]
    fn exact_inputs_give_an_exact_value() {
        let v = parse("{rf:replicas=3/run.tput} / 3 / {rf:replicas=0/run.tput}")
            .unwrap()
            .eval(&t())
            .unwrap();
        assert!(v.is_exact(), "{v:?}");
        assert!(v.why.is_empty());
    }

    #[test]
    fn wildcard_matching() {
        assert!(matches("*/run.tput", "threads=4/run.tput"));
        assert!(matches("a*c*e", "abcde"));
        assert!(!matches("a*c*e", "abcd"));
        assert!(matches("exact", "exact"));
        assert!(!matches("exact", "exact2"));
    }
}
