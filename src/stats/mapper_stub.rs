//! Stand-in for `mapper.rs` (branch `mapper`) with its API, until that branch is merged:
//! every statistic is unmatched and named as statsd_exporter escapes names.

/// What a statsd event is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatKind {
    Counter,
    Gauge,
    Timer,
}

/// How a timer is exposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimerType {
    Summary,
    Histogram,
}

/// A parsed mapping file.
#[derive(Debug, Default)]
pub struct Mapper;

/// What a statistic becomes.
#[derive(Debug, Clone)]
pub enum Mapping {
    Drop,
    Metric(Mapped),
}

/// A statistic's Prometheus name and labels.
#[derive(Debug, Clone)]
pub struct Mapped {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub timer_type: TimerType,
    pub buckets: Option<Vec<f64>>,
    pub help: Option<String>,
    pub scale: Option<f64>,
    pub matched: bool,
}

/// A mapping file that does not parse.
#[derive(Debug, Clone)]
pub struct MapperError {
    pub file: String,
    pub line: Option<usize>,
    pub message: String,
}

impl std::fmt::Display for MapperError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.file, self.message),
            None => write!(f, "{}: {}", self.file, self.message),
        }
    }
}

impl Mapper {
    pub fn parse(yaml: &str, file: &str) -> Result<Mapper, MapperError> {
        match serde_yaml::from_str::<serde::de::IgnoredAny>(yaml) {
            Ok(_) => Ok(Mapper),
            Err(e) => Err(MapperError {
                file: file.to_string(),
                line: e.location().map(|l| l.line()),
                message: e.to_string(),
            }),
        }
    }

    pub fn envoyproxy_default() -> &'static Mapper {
        static DEFAULT: Mapper = Mapper;
        &DEFAULT
    }

    pub fn map(&self, statsd_name: &str, _kind: StatKind) -> Mapping {
        let name = statsd_name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect();
        Mapping::Metric(Mapped {
            name,
            labels: Vec::new(),
            timer_type: TimerType::Summary,
            buckets: None,
            help: None,
            scale: None,
            matched: false,
        })
    }
}
