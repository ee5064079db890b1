//! The catastrophic detector's choice of the next view (§4.2, "Catastrophic failures"): the
//! coordinator leader "constructs a connectivity graph based on the reported link states and
//! changes the membership to approximately match the maximum clique in which it is included".
//! Here the match is exact: the largest clique that contains the leader, on up to 64 nodes.
//!
//! Vertices are indices `0..len` (the graph module numbers a view's members by their position);
//! a set of vertices is a `u64`, bit `i` for vertex `i`.
//!
//! The search is a bitset branch and bound in the style of Tomita's MCQ/MCS as San Segundo's
//! BBMC runs it: at each node of the search, the candidates are coloured greedily (each colour
//! class an independent set, so a clique takes at most one vertex per colour), and a branch is
//! cut when the clique so far plus the number of colours left cannot beat the best found.
//! Vertices are renumbered once, by non-increasing degree, so that colouring in bit order is
//! colouring by degree.
//!
//! Ties. Several cliques may share the largest size; the one returned is the *smallest by node
//! set*: the sorted lists of vertices compared lexicographically, so the clique that keeps the
//! lowest index wins, then the next lowest, and so on. With the view's members numbered by node
//! id, this keeps the lowest node ids. It is found without giving up the strict cut: first the
//! largest size `k`, then, vertex by vertex in ascending order, a vertex is taken when some
//! clique of size `k` still contains it with those taken so far (a search that stops at the
//! first witness; a witness from an earlier step answers yes for free).
//!
//! The colouring bound is tightened by MaxSAT reasoning (Li and Quan, 2010), unit propagation
//! only: sets of colour classes from which no clique takes one vertex each lower the bound by
//! one each. Without it, `k` joined five-cycles (each needs 3 colours but gives a clique 2
//! vertices) took 5.8 s on 60 vertices (1.2·10⁸ search nodes); with it, one node.
//!
//! Cost, measured (the `worst_case_times` test, `cargo test -p mu-ukharon clique -- --ignored
//! --nocapture`, test profile (optimized), on a shared x86 core; whole calls, ties included):
//!
//! * random graphs on 64 vertices, densities 5% to 99%, 20 seeds each: at most about 150 µs
//!   and 300 search nodes; a complete graph or one with a few cut links, the detector's usual
//!   case, a few µs.
//! * structured graphs on up to 64 vertices (joined odd cycles, joined Grötzsch and Mycielski
//!   graphs and their complements, hamming6-2 and hamming6-4, 21 joined triples with 3²¹
//!   largest cliques): at most 0.6 ms (five joined Grötzsch graphs, 7·10³ nodes).
//! * the worst found: a hill climb that toggled edges of a 64-vertex graph of density about 75%
//!   for 25 000 moves, keeping every change that made the search longer: 3.3·10⁵ nodes, 36 ms.
//!   Longer climbs would likely find worse: the problem is NP-hard.
//!
//! So a coordinator calls [`largest_clique_within`] with a budget of search nodes: exact
//! whenever the budget suffices (every graph above at 20 000 nodes but the climbed one),
//! otherwise the largest clique found so far, still a clique with the leader, flagged as not
//! exact.

/// The most vertices a [`Graph`] holds.
pub const VERTICES_MAX: usize = 64;

/// An undirected graph on vertices `0..len`, `len <= 64`, as one neighbour mask per vertex.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Graph {
    len: usize,
    adjacent: [u64; VERTICES_MAX],
}

/// Why a graph or a search was refused: bad input from the caller, never a panic.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum CliqueError {
    #[error("{len} vertices, at most {VERTICES_MAX}")]
    TooManyVertices { len: usize },
    #[error("vertex {vertex} out of range (the graph has {len})")]
    NoSuchVertex { vertex: usize, len: usize },
}

/// The set of vertices `0..len`.
fn all_below(len: usize) -> u64 {
    if len >= 64 {
        u64::MAX
    } else {
        (1u64 << len) - 1
    }
}

impl Graph {
    /// `len` vertices and no edges.
    pub fn empty(len: usize) -> Result<Graph, CliqueError> {
        if len > VERTICES_MAX {
            return Err(CliqueError::TooManyVertices { len });
        }
        Ok(Graph { len, adjacent: [0; VERTICES_MAX] })
    }

    /// `len` vertices, every pair joined.
    pub fn complete(len: usize) -> Result<Graph, CliqueError> {
        let mut g = Graph::empty(len)?;
        let all = all_below(len);
        for v in 0..len {
            g.adjacent[v] = all & !(1u64 << v);
        }
        Ok(g)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, vertex: usize) -> Result<(), CliqueError> {
        if vertex >= self.len {
            return Err(CliqueError::NoSuchVertex { vertex, len: self.len });
        }
        Ok(())
    }

    /// Joins `a` and `b` (a loop `a == b` is ignored: a vertex is never its own neighbour).
    pub fn join(&mut self, a: usize, b: usize) -> Result<(), CliqueError> {
        self.check(a)?;
        self.check(b)?;
        if a != b {
            self.adjacent[a] |= 1u64 << b;
            self.adjacent[b] |= 1u64 << a;
        }
        Ok(())
    }

    /// Removes the edge between `a` and `b`, if any.
    pub fn cut(&mut self, a: usize, b: usize) -> Result<(), CliqueError> {
        self.check(a)?;
        self.check(b)?;
        self.adjacent[a] &= !(1u64 << b);
        self.adjacent[b] &= !(1u64 << a);
        Ok(())
    }

    /// Removes every edge of `v`.
    pub fn isolate(&mut self, v: usize) -> Result<(), CliqueError> {
        self.check(v)?;
        let mut others = self.adjacent[v];
        while others != 0 {
            let u = others.trailing_zeros() as usize;
            others &= others - 1;
            self.adjacent[u] &= !(1u64 << v);
        }
        self.adjacent[v] = 0;
        Ok(())
    }

    pub fn joined(&self, a: usize, b: usize) -> bool {
        a < self.len && b < self.len && self.adjacent[a] & (1u64 << b) != 0
    }

    /// The neighbours of `v` as a set (empty for a vertex out of range).
    pub fn neighbours(&self, v: usize) -> u64 {
        if v < self.len {
            self.adjacent[v]
        } else {
            0
        }
    }

    /// Whether every two vertices of `set` are joined.
    pub fn is_clique(&self, set: u64) -> bool {
        if set & !all_below(self.len) != 0 {
            return false;
        }
        let mut rest = set;
        while rest != 0 {
            let v = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if set & !(1u64 << v) & !self.adjacent[v] != 0 {
                return false;
            }
        }
        true
    }
}

/// Whether `a` comes before `b` in the tie order of the module docs (sorted vertex lists
/// compared lexicographically, for sets of the same size): the lowest vertex in one set and not
/// the other belongs to `a`.
pub fn before_in_tie_order(a: u64, b: u64) -> bool {
    let differ = a ^ b;
    differ != 0 && a & differ & differ.wrapping_neg() != 0
}

/// The largest clique of `graph` that contains `leader`, exact, ties broken as the module docs
/// say (the smallest node set). Always contains `leader`. Unbounded: see
/// [`largest_clique_within`] for a search that must return in bounded time.
pub fn largest_clique_with(graph: &Graph, leader: usize) -> Result<u64, CliqueError> {
    largest_clique_within(graph, leader, u64::MAX).map(|choice| choice.clique)
}

/// What a bounded search found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Choice {
    /// A clique that contains the leader.
    pub clique: u64,
    /// Whether the search finished: `clique` is then the largest, first in the tie order. If
    /// not, it is the largest found within the budget (the paper's "approximately").
    pub exact: bool,
    /// Search nodes visited.
    pub steps: u64,
}

/// As [`largest_clique_with`], but visiting at most about `steps_max` search nodes (each costs
/// well under a microsecond on 64 vertices): a coordinator leader's single thread must not stall
/// on an adversarial graph (the module docs give the worst case measured).
pub fn largest_clique_within(
    graph: &Graph,
    leader: usize,
    steps_max: u64,
) -> Result<Choice, CliqueError> {
    graph.check(leader)?;
    let renumbered = Renumbered::by_degree(graph);
    let lead = renumbered.new_of[leader];
    let candidates = renumbered.graph.adjacent[lead];
    let mut search = Search::new(&renumbered.graph, steps_max);
    let witness = search.greedy(candidates);
    let best = search.largest(candidates, witness);
    let chosen = if search.out_of_steps {
        best
    } else {
        smallest_of_size(&renumbered, &mut search, candidates, best)
    };
    Ok(Choice {
        clique: renumbered.back(chosen) | (1u64 << leader),
        exact: !search.out_of_steps,
        steps: search.steps,
    })
}

/// Among the cliques inside `candidates` (renumbered) as large as `witness`, the smallest in the
/// tie order of the *original* numbering; `witness` itself if the search runs out of steps.
fn smallest_of_size(
    renumbered: &Renumbered,
    search: &mut Search,
    mut candidates: u64,
    mut witness: u64,
) -> u64 {
    let size = witness.count_ones();
    let mut taken = 0u64;
    let mut needed = size;
    for v_old in 0..renumbered.graph.len {
        if needed == 0 {
            break;
        }
        let v = renumbered.new_of[v_old];
        let bit = 1u64 << v;
        if candidates & bit == 0 {
            continue;
        }
        candidates &= !bit;
        let with_v = if witness & bit != 0 {
            Some(witness)
        } else {
            // A clique of `needed - 1` more among v's neighbours left, or none.
            let inside = candidates & renumbered.graph.adjacent[v];
            let found = search.reach(inside, needed - 1);
            if search.out_of_steps {
                return witness;
            }
            found.map(|rest| taken | bit | rest)
        };
        if let Some(w) = with_v {
            witness = w;
            taken |= bit;
            needed -= 1;
            candidates &= renumbered.graph.adjacent[v];
        }
    }
    debug_assert_eq!(taken.count_ones(), size);
    taken
}

/// The graph with its vertices renumbered by non-increasing degree (ties by index), and the
/// maps both ways.
struct Renumbered {
    graph: Graph,
    new_of: [usize; VERTICES_MAX],
    old_of: [usize; VERTICES_MAX],
}

impl Renumbered {
    fn by_degree(graph: &Graph) -> Renumbered {
        let mut order: Vec<usize> = (0..graph.len).collect();
        order.sort_by_key(|&v| (std::cmp::Reverse(graph.adjacent[v].count_ones()), v));
        let mut new_of = [0; VERTICES_MAX];
        let mut old_of = [0; VERTICES_MAX];
        for (new, &old) in order.iter().enumerate() {
            new_of[old] = new;
            old_of[new] = old;
        }
        let mut renumbered = Graph { len: graph.len, adjacent: [0; VERTICES_MAX] };
        for old in 0..graph.len {
            renumbered.adjacent[new_of[old]] = Renumbered::map(graph.adjacent[old], &new_of);
        }
        Renumbered { graph: renumbered, new_of, old_of }
    }

    fn map(mut set: u64, to: &[usize; VERTICES_MAX]) -> u64 {
        let mut out = 0;
        while set != 0 {
            let v = set.trailing_zeros() as usize;
            set &= set - 1;
            out |= 1u64 << to[v];
        }
        out
    }

    fn back(&self, set: u64) -> u64 {
        Renumbered::map(set, &self.old_of)
    }
}

/// The branch and bound over one graph, with its budget of search nodes.
struct Search<'g> {
    graph: &'g Graph,
    steps: u64,
    steps_max: u64,
    out_of_steps: bool,
}

/// What one search looks for: the best clique so far (to beat), and whether to stop at the
/// first clique that beats `floor`.
struct Goal {
    best: u64,
    floor: u32,
    first_only: bool,
}

impl<'g> Search<'g> {
    fn new(graph: &'g Graph, steps_max: u64) -> Search<'g> {
        Search { graph, steps: 0, steps_max, out_of_steps: false }
    }

    /// A maximal clique inside `candidates`, taking the lowest vertex each time (a starting
    /// bound).
    fn greedy(&self, mut candidates: u64) -> u64 {
        let mut clique = 0;
        while candidates != 0 {
            let v = candidates.trailing_zeros() as usize;
            clique |= 1u64 << v;
            candidates &= self.graph.adjacent[v];
        }
        clique
    }

    /// The largest clique inside `candidates`, given one (`known`) to beat.
    fn largest(&mut self, candidates: u64, known: u64) -> u64 {
        let mut goal = Goal { best: known, floor: known.count_ones(), first_only: false };
        self.expand(0, candidates, &mut goal);
        goal.best
    }

    /// A clique of exactly `size` vertices inside `candidates`, if there is one (None also when
    /// the steps run out: the caller checks `out_of_steps`).
    fn reach(&mut self, candidates: u64, size: u32) -> Option<u64> {
        if size == 0 {
            return Some(0);
        }
        let mut goal = Goal { best: 0, floor: size - 1, first_only: true };
        self.expand(0, candidates, &mut goal);
        // A clique bigger than asked has subsets of every smaller size: keep the lowest `size`.
        (goal.best != 0).then(|| {
            let mut out = 0;
            let mut rest = goal.best;
            for _ in 0..size {
                out |= rest & rest.wrapping_neg();
                rest &= rest - 1;
            }
            out
        })
    }

    /// Extends `clique` by vertices of `candidates` (all joined to every vertex of `clique`);
    /// returns true when the goal says to stop or the steps are spent.
    fn expand(&mut self, clique: u64, mut candidates: u64, goal: &mut Goal) -> bool {
        self.steps += 1;
        if self.steps > self.steps_max {
            self.out_of_steps = true;
            return true;
        }
        let mut order = [0u8; VERTICES_MAX];
        let mut colour_of = [0u8; VERTICES_MAX];
        let count = self.colour(candidates, &mut order, &mut colour_of);
        let size = clique.count_ones();
        let colours = if count == 0 { 0 } else { u32::from(colour_of[count - 1]) };
        if size + colours > goal.floor {
            let wanted = size + colours - goal.floor;
            if self.conflicts(&order[..count], &colour_of[..count], wanted) >= wanted {
                return false;
            }
        }
        for i in (0..count).rev() {
            if size + u32::from(colour_of[i]) <= goal.floor {
                return false;
            }
            let v = usize::from(order[i]);
            let grown = clique | (1u64 << v);
            let inside = candidates & self.graph.adjacent[v];
            if inside == 0 {
                if size + 1 > goal.floor {
                    goal.best = grown;
                    goal.floor = size + 1;
                    if goal.first_only {
                        return true;
                    }
                }
            } else if self.expand(grown, inside, goal) {
                return true;
            }
            candidates &= !(1u64 << v);
        }
        false
    }

    /// How many disjoint *inconsistent* sets of colour classes there are, counting up to
    /// `wanted`: sets from which a clique takes at most one vertex fewer than it has classes,
    /// so each lowers the colouring bound by one (Li and Quan's MaxSAT reasoning for maximum
    /// clique, by unit propagation only). A class of one vertex forces it; every class loses the
    /// vertices not joined to it; a class left empty is a conflict, and the forced classes with
    /// it make one set. This is what makes a five-cycle count 2, not its 3 colours.
    fn conflicts(&self, order: &[u8], colour_of: &[u8], wanted: u32) -> u32 {
        let mut classes = [0u64; VERTICES_MAX];
        let mut count = 0;
        for (&v, &c) in order.iter().zip(colour_of) {
            classes[usize::from(c) - 1] |= 1u64 << v;
            count = usize::from(c);
        }
        let mut free = all_below(count);
        let mut found = 0;
        while found < wanted {
            match self.propagate(&classes, free) {
                Some(used) => {
                    free &= !used;
                    found += 1;
                }
                None => break,
            }
        }
        found
    }

    /// Unit propagation over the classes in `free`: the classes of one conflict, if any.
    fn propagate(&self, classes: &[u64; VERTICES_MAX], free: u64) -> Option<u64> {
        let mut left = *classes;
        let mut forced = 0u64;
        loop {
            let mut open = free & !forced;
            let unit = loop {
                if open == 0 {
                    return None;
                }
                let i = open.trailing_zeros() as usize;
                open &= open - 1;
                if left[i].count_ones() == 1 {
                    break i;
                }
            };
            forced |= 1u64 << unit;
            let v = left[unit].trailing_zeros() as usize;
            let mut others = free & !forced;
            while others != 0 {
                let j = others.trailing_zeros() as usize;
                others &= others - 1;
                left[j] &= self.graph.adjacent[v];
                if left[j] == 0 {
                    return Some(forced | (1u64 << j));
                }
            }
        }
    }

    /// Greedy sequential colouring of `candidates` in bit order: `order[..count]` lists them by
    /// non-decreasing colour, `colour_of[i]` the colour (from 1) of `order[i]`.
    fn colour(
        &self,
        candidates: u64,
        order: &mut [u8; VERTICES_MAX],
        colour_of: &mut [u8; VERTICES_MAX],
    ) -> usize {
        let mut uncoloured = candidates;
        let mut count = 0;
        let mut colour = 0u8;
        while uncoloured != 0 {
            colour += 1;
            let mut open = uncoloured;
            while open != 0 {
                let v = open.trailing_zeros() as usize;
                open &= !(1u64 << v) & !self.graph.adjacent[v];
                uncoloured &= !(1u64 << v);
                order[count] = v as u8;
                colour_of[count] = colour;
                count += 1;
            }
        }
        count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn splitmix64(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A random graph on `len` vertices, each edge present with probability `percent`/100.
    fn random_graph(seed: u64, len: usize, percent: u64) -> Graph {
        let mut state = seed;
        let mut g = Graph::empty(len).unwrap();
        for a in 0..len {
            for b in a + 1..len {
                if splitmix64(&mut state) % 100 < percent {
                    g.join(a, b).unwrap();
                }
            }
        }
        g
    }

    /// Every subset that contains the leader, checked: the largest cliques, the first in the
    /// tie order.
    fn brute_force(g: &Graph, leader: usize) -> u64 {
        let mut best = 1u64 << leader;
        for set in 0..(1u64 << g.len()) {
            if set & (1u64 << leader) == 0 || !g.is_clique(set) {
                continue;
            }
            let (n, m) = (set.count_ones(), best.count_ones());
            if n > m || (n == m && before_in_tie_order(set, best)) {
                best = set;
            }
        }
        best
    }

    /// §4.2 "the maximum clique in which it is included": the search agrees with brute force,
    /// size and tie-break, on random graphs of 1 to 16 vertices at densities from sparse to
    /// nearly complete, and on small graphs with odd cycles (where the conflicts cut).
    #[test]
    fn agrees_with_brute_force_on_random_graphs() {
        let mut graphs = 0;
        for seed in 0..600u64 {
            let len = 1 + (seed % 16) as usize;
            let percent = [10, 30, 50, 70, 85, 95][(seed / 16 % 6) as usize];
            let g = random_graph(seed, len, percent);
            for leader in 0..len {
                let expected = brute_force(&g, leader);
                let got = largest_clique_with(&g, leader).unwrap();
                assert_eq!(
                    got, expected,
                    "seed {seed}: {len} vertices at {percent}%, leader {leader}: \
                     {got:#b} instead of {expected:#b}"
                );
                graphs += 1;
            }
        }
        assert!(graphs > 4000);
        let grotzsch = mycielski(&cycle(5));
        let cut = |mut g: Graph, a: usize, b: usize| {
            g.cut(a, b).unwrap();
            g
        };
        let structured = [
            joined_five_cycles(3),
            cut(joined_five_cycles(3), 0, 7),
            joined_copies(&cycle(7), 2),
            grotzsch.clone(),
            complement(&grotzsch),
            joined_copies(&complement(&cycle(5)), 3),
        ];
        for (i, g) in structured.iter().enumerate() {
            for leader in 0..g.len() {
                let expected = brute_force(g, leader);
                assert_eq!(largest_clique_with(g, leader).unwrap(), expected, "graph {i}");
            }
        }
    }

    /// Ties (module docs): of the two triangles through the leader, the one with the lower
    /// vertices; of two equal cliques that differ only in their last vertex, the lower one.
    #[test]
    fn ties_keep_the_lowest_vertices() {
        let mut g = Graph::empty(6).unwrap();
        for (a, b) in [(2, 4), (2, 5), (4, 5), (2, 1), (2, 3), (1, 3)] {
            g.join(a, b).unwrap();
        }
        assert_eq!(largest_clique_with(&g, 2).unwrap(), 0b1110);
        assert!(before_in_tie_order(0b0011, 0b0101) && !before_in_tie_order(0b0101, 0b0011));
        assert!(before_in_tie_order(0b1001, 0b1010) && !before_in_tie_order(0b11, 0b11));
    }

    /// §4.2: the leader is always part of the chosen view; an isolated leader stays alone, a
    /// complete graph keeps everyone, up to 64 nodes.
    #[test]
    fn edge_cases_isolated_complete_and_64_nodes() {
        let g = Graph::complete(64).unwrap();
        assert_eq!(largest_clique_with(&g, 63).unwrap(), u64::MAX);
        let mut g = Graph::complete(64).unwrap();
        g.isolate(17).unwrap();
        assert_eq!(largest_clique_with(&g, 17).unwrap(), 1 << 17);
        assert_eq!(largest_clique_with(&g, 0).unwrap(), !(1u64 << 17));
        let g = Graph::complete(1).unwrap();
        assert_eq!(largest_clique_with(&g, 0).unwrap(), 1);
        // One cut link of a complete graph: one end leaves, the higher one (tie order).
        let mut g = Graph::complete(64).unwrap();
        g.cut(40, 50).unwrap();
        assert_eq!(largest_clique_with(&g, 0).unwrap(), !(1u64 << 50));
        // ...unless the higher one is the leader.
        assert_eq!(largest_clique_with(&g, 50).unwrap(), !(1u64 << 40));
    }

    #[test]
    fn bad_input_is_an_error() {
        assert_eq!(Graph::empty(65), Err(CliqueError::TooManyVertices { len: 65 }));
        let mut g = Graph::empty(3).unwrap();
        assert_eq!(g.join(0, 3), Err(CliqueError::NoSuchVertex { vertex: 3, len: 3 }));
        assert_eq!(
            largest_clique_with(&g, 5),
            Err(CliqueError::NoSuchVertex { vertex: 5, len: 3 })
        );
        g.join(1, 1).unwrap();
        assert!(!g.joined(1, 1) && !g.is_clique(0b1000) && g.is_clique(0b100));
    }

    /// §4.2 on 64 nodes (beyond brute force): the answer is a clique, contains the leader, and
    /// is at least as large as a clique planted in a random graph.
    #[test]
    fn planted_cliques_in_64_nodes_are_found() {
        for seed in 0..40u64 {
            let mut state = seed ^ 0x5eed;
            let percent = [50, 80, 90, 95][(seed % 4) as usize];
            let mut g = random_graph(seed, 64, percent);
            let planted = splitmix64(&mut state) | 1;
            let mut rest = planted;
            while rest != 0 {
                let v = rest.trailing_zeros() as usize;
                rest &= rest - 1;
                let mut others = planted & !(1u64 << v);
                while others != 0 {
                    let u = others.trailing_zeros() as usize;
                    others &= others - 1;
                    g.join(u, v).unwrap();
                }
            }
            let got = largest_clique_with(&g, 0).unwrap();
            assert!(g.is_clique(got) && got & 1 == 1, "seed {seed}: {got:#x} not a clique");
            assert!(got.count_ones() >= planted.count_ones(), "seed {seed}: missed the plant");
        }
    }

    /// `copies` copies of `h`, every vertex joined to every vertex of the other copies: the
    /// largest clique is `copies` times `h`'s, the colouring bound `copies` times `h`'s
    /// chromatic number.
    fn joined_copies(h: &Graph, copies: usize) -> Graph {
        let mut g = Graph::complete(h.len() * copies).unwrap();
        for c in 0..copies {
            for a in 0..h.len() {
                for b in a + 1..h.len() {
                    if !h.joined(a, b) {
                        g.cut(c * h.len() + a, c * h.len() + b).unwrap();
                    }
                }
            }
        }
        g
    }

    fn cycle(len: usize) -> Graph {
        let mut g = Graph::empty(len).unwrap();
        for i in 0..len {
            g.join(i, (i + 1) % len).unwrap();
        }
        g
    }

    fn complement(h: &Graph) -> Graph {
        let mut g = Graph::complete(h.len()).unwrap();
        for a in 0..h.len() {
            for b in a + 1..h.len() {
                if h.joined(a, b) {
                    g.cut(a, b).unwrap();
                }
            }
        }
        g
    }

    /// Mycielski's construction: the same largest clique (2 for triangle-free `h`), one more
    /// colour. From a five-cycle, the Grötzsch graph (11 vertices, clique 2, 4 colours).
    fn mycielski(h: &Graph) -> Graph {
        let n = h.len();
        let mut g = Graph::empty(2 * n + 1).unwrap();
        for a in 0..n {
            for b in 0..n {
                if h.joined(a, b) {
                    g.join(a, b).unwrap();
                    g.join(n + a, b).unwrap();
                }
            }
            g.join(n + a, 2 * n).unwrap();
        }
        g
    }

    /// Words of 6 bits, joined when they differ in at least `distance` bits (the DIMACS
    /// benchmarks hamming6-2 and hamming6-4).
    fn hamming6(distance: u32) -> Graph {
        let mut g = Graph::empty(64).unwrap();
        for a in 0..64usize {
            for b in a + 1..64 {
                if (a ^ b).count_ones() >= distance {
                    g.join(a, b).unwrap();
                }
            }
        }
        g
    }

    /// `cycles` five-cycles joined: each cycle gives at most 2 vertices to a clique but needs 3
    /// colours, the case where the colouring bound alone is furthest from the answer (5.8 s on
    /// 60 vertices before the conflicts of `Search::conflicts`).
    fn joined_five_cycles(cycles: usize) -> Graph {
        joined_copies(&cycle(5), cycles)
    }

    /// The budget: a search cut short stops after its steps with a clique that contains the
    /// leader, flagged inexact; with enough steps it is exact and agrees with the unbounded
    /// search.
    #[test]
    fn a_bounded_search_returns_a_clique_in_time() {
        for seed in 0..20u64 {
            let g = random_graph(seed, 64, 85);
            let exact = largest_clique_with(&g, 3).unwrap();
            let cut_short = largest_clique_within(&g, 3, 3).unwrap();
            assert!(!cut_short.exact && cut_short.steps <= 4, "seed {seed}: {cut_short:?}");
            assert!(g.is_clique(cut_short.clique) && cut_short.clique & (1 << 3) != 0);
            assert!(cut_short.clique.count_ones() <= exact.count_ones());
            let ample = largest_clique_within(&g, 3, 1_000_000).unwrap();
            assert!(ample.exact, "seed {seed}");
            assert_eq!(ample.clique, exact, "seed {seed}");
        }
    }

    /// The colouring bound alone needs 3 colours per five-cycle where a clique takes 2; the
    /// conflicts (`Search::conflicts`) count it right, so twelve joined five-cycles take one
    /// search node instead of 10⁸.
    #[test]
    fn odd_cycles_are_bounded_by_their_conflicts() {
        let g = joined_five_cycles(12);
        let choice = largest_clique_within(&g, 7, 100).unwrap();
        assert!(choice.exact, "{choice:?}");
        assert_eq!(choice.clique.count_ones(), 24);
        assert!(g.is_clique(choice.clique) && choice.clique & (1 << 7) != 0);
        let g = joined_copies(&cycle(7), 9);
        let choice = largest_clique_within(&g, 0, 100).unwrap();
        assert!(choice.exact && choice.clique.count_ones() == 18, "{choice:?}");
    }

    /// Cost of the exact search on 64 vertices: every density from 5% to 99% on several seeds,
    /// leader 0, printed as the slowest time and the most search nodes per density. Run with
    /// `-- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn worst_case_times() {
        for percent in [5, 25, 50, 70, 80, 85, 90, 93, 95, 97, 99] {
            let (mut slowest_us, mut most_nodes, mut size) = (0u128, 0u64, 0);
            for seed in 0..20u64 {
                let g = random_graph(seed * 1000 + percent, 64, percent);
                let start = std::time::Instant::now();
                let got = largest_clique_within(&g, 0, u64::MAX).unwrap();
                slowest_us = slowest_us.max(start.elapsed().as_micros());
                size = size.max(got.clique.count_ones());
                most_nodes = most_nodes.max(got.steps);
            }
            println!(
                "64 vertices at {percent:>2}%: slowest {slowest_us} us, most nodes {most_nodes}, \
                 largest clique {size}"
            );
        }
        let grotzsch = mycielski(&cycle(5));
        let structured = [
            ("12 joined five-cycles", joined_five_cycles(12)),
            ("9 joined seven-cycles", joined_copies(&cycle(7), 9)),
            ("7 joined nine-cycles", joined_copies(&cycle(9), 7)),
            ("9 joined complements of seven-cycles", joined_copies(&complement(&cycle(7)), 9)),
            ("5 joined Grötzsch graphs", joined_copies(&grotzsch, 5)),
            ("2 joined Mycielski(Grötzsch)", joined_copies(&mycielski(&grotzsch), 2)),
            (
                "complement of 2 Mycielski(Grötzsch)",
                complement(&joined_copies(&mycielski(&grotzsch), 2)),
            ),
            ("hamming6-2", hamming6(2)),
            ("hamming6-4", hamming6(4)),
            (
                "21 joined triples (3^21 largest cliques)",
                joined_copies(&Graph::empty(3).unwrap(), 21),
            ),
        ];
        for (name, g) in structured {
            let start = std::time::Instant::now();
            let got = largest_clique_within(&g, 0, u64::MAX).unwrap();
            let us = start.elapsed().as_micros();
            println!(
                "{name} ({} vertices): {us} us, {} nodes, largest clique {}",
                g.len(),
                got.steps,
                got.clique.count_ones()
            );
        }
    }
}
