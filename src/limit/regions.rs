//! A limit shared by several regions (`global:`, docs/multi-region.md): which region is home
//! (its Redis holds the authority), which regions share it, and what a region does once it
//! is cut off from home.

/// `global:` on a limit, as compiled.
#[derive(Debug, Clone, PartialEq)]
pub struct AcrossRegions {
    /// Names the limit in every region's Redis and on home's authority: the domain, the
    /// rule's composite key and the limit's key suffix (`domain|key_value|f60`).
    pub id: String,
    /// The region whose Redis holds the authority.
    pub home: String,
    /// Every region that shares the limit (home among them), in the order the authority
    /// numbers them.
    pub regions: Vec<String>,
    /// Cut off from home, a region spends this fraction of the limit per window once its
    /// lease is spent (`on_partition: safe_share`); `None` refuses (`on_partition: refuse`).
    pub safe_share: Option<f64>,
}

impl AcrossRegions {
    /// This region's number among the limit's regions.
    pub fn index_of(&self, region: &str) -> Option<usize> {
        self.regions.iter().position(|r| r == region)
    }
}
