//! The built-in corpus of the `deep_research` demo and its keyword scorer.
//!
//! 29 short documents on four topics (MCP tasks, async Rust, grid batteries,
//! sleep science), plus *facets*: the sub-questions a researcher would ask
//! about each topic, with the keywords a search uses and the facets worth a
//! follow-up. Everything is static and offline; the sources are illustrative
//! (`*.example.*` hosts), not real publications.
//!
//! The planner of `deep_research` lives here too: it ranks facets for a
//! question (or a steer's focus) by the same scores.
//!
//! Scoring is deliberately simple: questions are split into lower-case terms
//! (stop words dropped, plurals and `-ing`/`-ed` endings trimmed), and a term
//! matches a text or keyword by substring in either direction.

use std::collections::HashSet;
use std::sync::LazyLock;

/// A document of the corpus.
#[derive(Debug)]
pub struct Document {
    /// Stable id, e.g. `tasks-03`.
    pub id: &'static str,
    /// The topic id (see [`TOPICS`]).
    pub topic: &'static str,
    /// Title.
    pub title: &'static str,
    /// Where it (notionally) comes from.
    pub source: &'static str,
    /// Three or so sentences.
    pub body: String,
}

/// A sub-question a topic invites.
#[derive(Debug)]
pub struct Facet {
    /// Stable id, e.g. `tasks-failures`.
    pub id: &'static str,
    /// The topic id.
    pub topic: &'static str,
    /// The sub-question.
    pub question: &'static str,
    /// Search keywords (lower case; prefixes such as `degrad` are fine).
    pub keywords: Vec<&'static str>,
    /// Facets worth a follow-up once this one is answered.
    pub follow_ups: Vec<&'static str>,
}

/// A topic: an id and a display name.
#[derive(Debug)]
pub struct Topic {
    /// Stable id.
    pub id: &'static str,
    /// Display name.
    pub name: &'static str,
}

/// The topics.
pub static TOPICS: &[Topic] = &[
    Topic {
        id: "mcp-tasks",
        name: "MCP tasks and long-running tool calls",
    },
    Topic {
        id: "async-rust",
        name: "async Rust and Tokio",
    },
    Topic {
        id: "batteries",
        name: "grid-scale battery storage",
    },
    Topic {
        id: "sleep",
        name: "sleep and circadian rhythms",
    },
];

/// The documents: a header line `id | topic | title | source`, then the
/// body on indented lines.
const DOCUMENT_TABLE: &str = "
tasks-01 | mcp-tasks | Tasks in a nutshell | MCP Tasks Guide (draft), section 1
    A request that may take long can be augmented with a task. The server answers at once with a taskId
    and does the work in the background. A task moves through working, input_required, completed, failed
    and cancelled; the last three statuses are terminal.
tasks-02 | mcp-tasks | Polling with tasks/get | MCP Tasks Guide (draft), section 3
    Clients track a task by polling tasks/get no faster than its suggested pollInterval. Servers may
    also push status notifications, but polling stays the reliable fallback. The statusMessage tells the
    user what a long task is doing right now.
tasks-03 | mcp-tasks | Getting results with tasks/result | MCP Tasks Guide (draft), section 4
    tasks/result waits until the task is terminal and returns exactly what the original request would
    have returned, such as a CallToolResult. A tool error is a completed task whose result has isError
    set. A failed task carries a JSON-RPC error instead.
tasks-04 | mcp-tasks | Time to live and deletion | MCP Tasks Guide (draft), section 5
    Every task has a ttl in milliseconds counted from its creation. When the ttl elapses the server may
    fail unfinished work as expired and later delete the task. Clients should fetch results before the
    retention window closes.
tasks-05 | mcp-tasks | Cancelling a task | MCP Tasks Guide (draft), section 6
    tasks/cancel asks the server to stop the work. The task turns cancelled only after its handler has
    unwound and every subtask has ended. A handler that ignores the cancel is aborted after a grace
    period.
tasks-06 | mcp-tasks | When the server needs input | MCP Tasks Guide (draft), section 7
    When the server needs the user, the task moves to input_required and lists its inputRequests. The
    client answers with tasks/update and the task returns to working. Input keys are never reused within
    a task.
tasks-07 | mcp-tasks | SEP-2268: subtasks | SEP-2268 (proposal text)
    A task may spawn subtasks linked by parentTaskId and childTaskIds, forming a task tree. A parent
    completes only after all of its children are terminal. Results of a task tree stream children first,
    in childTaskIds order.
tasks-08 | mcp-tasks | SEP-2669: pause, resume and steer | SEP-2669 (proposal text)
    tasks/pause halts a task and its live descendants at their next safe point, and tasks/resume
    continues them. tasks/steer queues a message that the handler receives at its next checkpoint, once
    and in order. Clients without pause support see a paused task as working.
tasks-09 | mcp-tasks | Failure handling in task trees | ops.example.org/mcp/failure-handling
    By default a parent supervises its subtasks: a failed child is reported to the parent, which decides
    what to do. A fail-fast subtask instead cancels its siblings and fails the parent. When a deep call
    times out, return partial results with isError rather than failing outright, and retry idempotent
    steps as a new task.
async-01 | async-rust | Futures are lazy state machines | async-book.example.dev/futures
    An async fn returns a future that does nothing until it is polled. The compiler turns the function
    body into a state machine whose states are the await points. An executor such as Tokio polls futures
    again when their wakers fire.
async-02 | async-rust | Spawning tasks on Tokio | tokio-guide.example.dev/spawning
    tokio::spawn runs a future as an independent task on the runtime's worker threads. A spawned task
    must be Send and 'static because it may move between threads. Its JoinHandle returns the output, or
    a JoinError if the task panicked or was aborted.
async-03 | async-rust | Cancellation by dropping | async-book.example.dev/cancellation
    Dropping a future cancels it at its current await point; only destructors run after that. A function
    is cancellation safe when dropping it midway loses no data. tokio::select! drops the branches that
    lose, so their futures must be cancellation safe.
async-04 | async-rust | Blocking inside async code | tokio-guide.example.dev/blocking
    Blocking calls such as heavy computation or synchronous file IO stall a worker thread and every task
    scheduled on it. Move blocking work to spawn_blocking or a dedicated thread pool. Holding a std
    mutex across an await point can deadlock the executor.
async-05 | async-rust | Backpressure with bounded channels | blog.example.dev/async-backpressure
    Bounded channels make a fast producer wait when the consumer falls behind. Unbounded queues hide
    overload until memory runs out. A semaphore limits how many operations run at once.
async-06 | async-rust | Timeouts and time in tests | tokio-guide.example.dev/time
    tokio::time::timeout fails a future with Elapsed when its deadline passes. In tests, a paused clock
    lets every sleep finish instantly, so timing is deterministic. Timers live in a hierarchical wheel,
    so many sleeps are cheap.
async-07 | async-rust | Structured concurrency | blog.example.dev/structured-concurrency
    Structured concurrency ties the lifetime of child tasks to a parent scope so that none outlives it.
    A JoinSet collects spawned tasks and aborts those still running when it is dropped. Errors then
    reach the parent instead of vanishing in a detached task.
batt-01 | batteries | Why grids store energy | energy-notes.example.org/grid-storage
    Grid batteries absorb surplus solar and wind power and release it during evening peaks. Most
    installed battery systems deliver their rated power for two to four hours. Storage also provides
    fast frequency response, reacting within milliseconds.
batt-02 | batteries | LFP versus NMC chemistry | energy-notes.example.org/chemistry
    Lithium iron phosphate (LFP) cells store less energy per kilogram than nickel manganese cobalt (NMC)
    cells but last more cycles. LFP has become the dominant battery chemistry for stationary storage
    because weight matters little there. LFP is also more tolerant of heat and overcharge.
batt-03 | batteries | Degradation and cycle life | battery-lab.example.edu/degradation
    Battery capacity fades with every charge cycle and with calendar time. Deep discharges, high
    temperatures and long periods at a high state of charge accelerate degradation. Operators keep cells
    between roughly 10 and 90 percent charge to extend their life.
batt-04 | batteries | Thermal runaway and fire safety | battery-lab.example.edu/safety
    A damaged or overheated lithium-ion cell can enter thermal runaway, releasing heat and flammable
    gas. Modern installations separate modules, monitor cell temperatures and vent gas so a failure
    cannot spread. Fire codes require spacing and suppression systems at large battery sites.
batt-05 | batteries | The cost of storage | energy-notes.example.org/costs
    Battery pack prices fell by about 90 percent over the last decade. The levelised cost of storage
    depends on cycles per year, round-trip efficiency and financing. Revenue stacking combines
    arbitrage, capacity payments and grid services.
batt-06 | batteries | Recycling and second life | circular.example.org/batteries
    Retired electric-vehicle packs with 70 to 80 percent of their capacity can serve a second life in
    stationary storage. Hydrometallurgical recycling recovers lithium, nickel and cobalt for new cells.
    Recycling LFP pays less because its materials are cheaper.
batt-07 | batteries | Long-duration alternatives | energy-notes.example.org/long-duration
    Pumped hydro still provides most of the world's storage capacity. Flow batteries, compressed air and
    iron-air cells target durations of ten hours or more. Seasonal storage may instead rely on hydrogen.
sleep-01 | sleep | The circadian clock | sleep-handbook.example.org/circadian
    A master clock in the brain runs a roughly 24-hour circadian rhythm that morning light resets every
    day. It times hormone release such as melatonin, body temperature and alertness. Evening light from
    screens delays the clock and makes falling asleep harder.
sleep-02 | sleep | Sleep stages | sleep-handbook.example.org/stages
    A night of sleep cycles through light sleep, deep slow-wave sleep and REM sleep about every 90
    minutes. Deep sleep dominates the first half of the night and REM sleep the second. Memory
    consolidation depends on both stages.
sleep-03 | sleep | Caffeine and adenosine | sleep-handbook.example.org/caffeine
    Adenosine builds up while we are awake and creates sleep pressure. Caffeine blocks adenosine
    receptors, masking tiredness without removing it. Its half-life of five to six hours means an
    afternoon coffee still affects sleep at night.
sleep-04 | sleep | Sleep debt | health-review.example.com/sleep-debt
    Adults need about seven to nine hours of sleep. Chronic short sleep impairs attention, mood and
    glucose regulation, and people underestimate their own impairment. Recovery sleep at weekends repays
    only part of the debt.
sleep-05 | sleep | Naps | health-review.example.com/naps
    A nap of 10 to 20 minutes improves alertness without grogginess. Longer naps reach deep sleep and
    can cause sleep inertia on waking. Late-afternoon naps reduce sleep pressure at bedtime.
sleep-06 | sleep | Shift work and jet lag | health-review.example.com/shift-work
    Night shift work and jet lag put the internal clock out of step with the day. Timed bright light and
    melatonin can shift the clock by an hour or two per day. Long-term shift work is linked to metabolic
    and cardiovascular risk.
";

/// The facets, in the order a generic question on their topic covers them:
/// a header line `id | topic | question`, then an indented line
/// `keywords | follow-up facets`.
const FACET_TABLE: &str = "
tasks-lifecycle | mcp-tasks | How does a long-running call become a task, and how is it tracked?
    task, background, working, poll, status, long | tasks-results, tasks-subtasks
tasks-interaction | mcp-tasks | How can a client interact with a running task (input, steering, pause)?
    input, steer, pause, resume, update | tasks-subtasks
tasks-failures | mcp-tasks | How are failures, cancellation and timeouts handled?
    fail, error, cancel, timeout, abort, retry | tasks-ttl
tasks-results | mcp-tasks | How does a client get the result of a task?
    result, terminal, iserror, calltoolresult | tasks-ttl
tasks-subtasks | mcp-tasks | How do subtasks form a task tree?
    subtask, parent, child, tree | tasks-failures
tasks-ttl | mcp-tasks | How long is task state kept, and when is it deleted?
    ttl, delete, retention, expire | 
async-model | async-rust | What is a future, and what runs it?
    future, poll, executor, state machine, waker, lazy | async-spawn
async-spawn | async-rust | How are tasks spawned and joined on Tokio?
    spawn, joinhandle, thread, send, task | async-structured
async-cancel | async-rust | How does cancellation work in async Rust?
    cancel, drop, select, abort | async-timeouts
async-blocking | async-rust | What goes wrong when async code blocks?
    block, stall, mutex, deadlock, thread | async-backpressure
async-backpressure | async-rust | How do async systems cope with overload?
    backpressure, bounded, channel, semaphore, overload, queue | 
async-timeouts | async-rust | How are timeouts and time handled, also in tests?
    timeout, deadline, sleep, timer, test, clock | 
async-structured | async-rust | How does structured concurrency keep tasks from leaking?
    structured, scope, joinset, outlive, detached | 
batt-role | batteries | What role does battery storage play on the grid?
    grid, peak, solar, wind, frequency, hours | batt-alternatives, batt-cost
batt-chemistry | batteries | Which battery chemistries are used for stationary storage?
    lfp, nmc, chemistry, phosphate, cobalt, lithium | batt-degradation
batt-degradation | batteries | How and why do batteries degrade?
    degrad, capacity, fade, cycle, temperature, charge | batt-safety
batt-safety | batteries | What are the fire risks, and how are they managed?
    fire, thermal, runaway, safety, gas, suppression | 
batt-cost | batteries | What does storage cost, and how does it earn money?
    cost, price, revenue, arbitrage, levelised, financ | 
batt-lifecycle | batteries | What happens to batteries at the end of their life?
    recycl, second life, retired, recover | 
batt-alternatives | batteries | What are the alternatives for long-duration storage?
    pumped, hydro, flow, long-duration, hydrogen, seasonal | 
sleep-clock | sleep | How does the circadian clock regulate sleep?
    circadian, clock, light, melatonin, rhythm | sleep-shift
sleep-stages | sleep | What happens during the stages of sleep?
    stage, rem, slow-wave, memory, cycle | 
sleep-caffeine | sleep | How does caffeine affect sleep?
    caffeine, adenosine, coffee, half-life, pressure | sleep-naps
sleep-debt | sleep | What does too little sleep do?
    debt, short sleep, impair, recovery, hours | sleep-naps
sleep-naps | sleep | Do naps help?
    nap, inertia, alert | 
sleep-shift | sleep | How do shift work and jet lag disrupt sleep?
    shift, jet lag, night, melatonin | 
";

/// Records of a table: the header fields and the indented lines after it.
fn records(table: &'static str) -> Vec<(Vec<&'static str>, Vec<&'static str>)> {
    let mut out: Vec<(Vec<&'static str>, Vec<&'static str>)> = Vec::new();
    for line in table.lines().filter(|l| !l.trim().is_empty()) {
        match out.last_mut() {
            Some((_, rest)) if line.starts_with(' ') => rest.push(line.trim()),
            _ => out.push((line.split(" | ").map(str::trim).collect(), Vec::new())),
        }
    }
    out
}

fn list(s: &'static str) -> Vec<&'static str> {
    s.split(',').map(str::trim).filter(|s| !s.is_empty()).collect()
}

/// The documents.
pub static DOCUMENTS: LazyLock<Vec<Document>> = LazyLock::new(|| {
    let doc = |(head, body): (Vec<&'static str>, Vec<&'static str>)| {
        let [id, topic, title, source] = head[..] else {
            panic!("bad document header {head:?}")
        };
        Document {
            id,
            topic,
            title,
            source,
            body: body.join(" "),
        }
    };
    records(DOCUMENT_TABLE).into_iter().map(doc).collect()
});

/// The facets.
pub static FACETS: LazyLock<Vec<Facet>> = LazyLock::new(|| {
    let facet = |(head, rest): (Vec<&'static str>, Vec<&'static str>)| {
        let ([id, topic, question], [line]) = (&head[..], &rest[..]) else {
            panic!("bad facet {head:?}")
        };
        let (keywords, follow_ups) = line.split_once('|').unwrap_or((line, ""));
        Facet {
            id,
            topic,
            question,
            keywords: list(keywords),
            follow_ups: list(follow_ups),
        }
    };
    records(FACET_TABLE).into_iter().map(facet).collect()
});

/// Words a question uses that say nothing about its subject.
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "an", "and", "any", "are", "as", "at", "be", "been", "best",
    "between", "but", "by", "can", "could", "did", "do", "does", "doing", "done", "each", "for", "from",
    "get", "give", "good", "has", "have", "how", "i", "if", "in", "into", "is", "it", "its", "just", "know",
    "me", "more", "most", "much", "my", "need", "not", "of", "on", "one", "or", "other", "our", "out",
    "over", "should", "so", "some", "than", "that", "the", "their", "them", "then", "there", "these", "they",
    "this", "those", "to", "up", "us", "use", "used", "very", "was", "way", "we", "were", "work", "works",
    "what", "when", "where", "which", "while", "who", "why", "will", "with", "would", "you", "your",
];

/// The document with this id.
pub fn document(id: &str) -> Option<&'static Document> {
    DOCUMENTS.iter().find(|d| d.id == id)
}

/// The facet with this id.
pub fn facet(id: &str) -> Option<&'static Facet> {
    FACETS.iter().find(|f| f.id == id)
}

/// The topic with this id.
pub fn topic(id: &str) -> Option<&'static Topic> {
    TOPICS.iter().find(|t| t.id == id)
}

/// Trims a plural or an `-ing` / `-ed` ending (a crude stemmer, enough for
/// matching by substring).
fn stem(word: &str) -> String {
    let n = word.len();
    let cut = if n > 4 && word.ends_with("ies") {
        return format!("{}y", &word[..n - 3]);
    } else if n > 5 && word.ends_with("ing") {
        3
    } else if n > 4 && word.ends_with("ed") && !word.ends_with("eed") {
        2
    } else if n > 3 && word.ends_with('s') && !word.ends_with("ss") && !word.ends_with("us") {
        return word[..n - 1].to_owned();
    } else {
        return word.to_owned();
    };
    let mut stem = word[..n - cut].to_owned();
    // "running" -> "run", "cancelled" -> "cancel".
    let b = stem.as_bytes();
    if b.len() > 3 && b[b.len() - 1] == b[b.len() - 2] && !b"aeiousz".contains(&b[b.len() - 1]) {
        stem.pop();
    }
    stem
}

/// The search terms of `text`: lower-case words (keeping `-`, `/` and `_`
/// inside words) without stop words, stemmed, deduplicated, in order.
pub fn terms(text: &str) -> Vec<String> {
    let lower = text.to_lowercase();
    let mut out: Vec<String> = Vec::new();
    for raw in lower.split(|c: char| !(c.is_alphanumeric() || matches!(c, '-' | '/' | '_' | '\''))) {
        let word = raw.trim_matches(|c: char| matches!(c, '-' | '/' | '_' | '\''));
        let word = word.strip_suffix("'s").unwrap_or(word);
        if word.len() < 2 || STOP_WORDS.contains(&word) {
            continue;
        }
        let s = stem(word);
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// Whether two terms (or a term and a keyword) match: equal, or the
/// shorter has at least four characters and, less its last one, starts the
/// longer (so `fail` matches `failure` and `degrade` matches `degradation`,
/// but `rem` does not match `remove` nor `cell` match `cancellation`).
pub fn term_matches(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    if short == long {
        return true;
    }
    match short.char_indices().nth(3).and(short.char_indices().last()) {
        Some((last, _)) => long.starts_with(&short[..last]),
        None => false,
    }
}

/// How many times `keyword` occurs in `text` (lower case).
fn occurrences(text: &str, keyword: &str) -> u32 {
    text.matches(keyword).count() as u32
}

/// Keyword score of a document: two points per occurrence in the title, one
/// per occurrence in the body.
pub fn score_document(doc: &Document, keywords: &[String]) -> u32 {
    let title = doc.title.to_lowercase();
    let body = doc.body.to_lowercase();
    keywords
        .iter()
        .filter(|k| !k.is_empty())
        .map(|k| 2 * occurrences(&title, k) + occurrences(&body, k))
        .sum()
}

/// How well `terms` match a facet: three points per term in its question,
/// two per term matching one of its keywords.
pub fn score_facet(facet: &Facet, terms: &[String]) -> u32 {
    let question = self::terms(facet.question);
    terms
        .iter()
        .map(|t| {
            let in_question = question.iter().any(|q| term_matches(t, q));
            let in_keywords = facet.keywords.iter().any(|k| term_matches(t, k));
            3 * u32::from(in_question) + 2 * u32::from(in_keywords)
        })
        .sum()
}

/// How well `terms` match a topic: the number of (term, document) pairs of
/// the topic where the document has a matching term.
pub fn score_topic(topic: &str, terms: &[String]) -> u32 {
    DOCUMENTS
        .iter()
        .filter(|d| d.topic == topic)
        .map(|d| {
            let words = self::terms(&format!("{} {}", d.title, d.body));
            terms
                .iter()
                .filter(|t| words.iter().any(|w| term_matches(t, w)))
                .count() as u32
        })
        .sum()
}

/// The best documents for `keywords` (within `topic` when given): scoring
/// above zero and at least a third of the best score, best first (corpus
/// order on ties), at most `limit`.
pub fn search(keywords: &[String], topic: Option<&str>, limit: usize) -> Vec<(&'static Document, u32)> {
    let mut hits: Vec<(usize, &'static Document, u32)> = DOCUMENTS
        .iter()
        .enumerate()
        .filter(|(_, d)| topic.is_none_or(|t| d.topic == t))
        .map(|(i, d)| (i, d, score_document(d, keywords)))
        .filter(|(_, _, s)| *s > 0)
        .collect();
    hits.sort_by_key(|&(i, _, s)| (std::cmp::Reverse(s), i));
    let best = hits.first().map_or(0, |h| h.2);
    hits.into_iter()
        .filter(|h| 3 * h.2 >= best)
        .take(limit)
        .map(|(_, d, s)| (d, s))
        .collect()
}

/// Up to `n` sentences of `body` that mention the keywords, best first
/// when ranking (most keywords; earlier on a tie) and returned in text
/// order, joined; the first sentence if none mentions any.
pub fn excerpt(body: &str, keywords: &[String], n: usize) -> String {
    let sentences: Vec<&str> = body.split_inclusive(". ").map(str::trim).collect();
    let hits = |s: &str| {
        let l = s.to_lowercase();
        keywords.iter().filter(|k| l.contains(k.as_str())).count()
    };
    let mut ranked: Vec<usize> = (0..sentences.len()).filter(|&i| hits(sentences[i]) > 0).collect();
    ranked.sort_by_key(|&i| (std::cmp::Reverse(hits(sentences[i])), i));
    ranked.truncate(n.max(1));
    ranked.sort_unstable();
    if ranked.is_empty() {
        ranked.push(0);
    }
    ranked.iter().map(|&i| sentences[i]).collect::<Vec<_>>().join(" ")
}

// ----- planning ------------------------------------------------------------------

/// A planned sub-question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubQuestion {
    /// The question.
    pub question: String,
    /// Search keywords.
    pub keywords: Vec<String>,
    /// The facet it comes from (`None`: free-form).
    pub facet: Option<&'static str>,
    /// The topic searched (`None`: the whole corpus).
    pub topic: Option<&'static str>,
}

impl SubQuestion {
    /// The sub-question of a facet.
    pub fn from_facet(f: &'static Facet) -> Self {
        SubQuestion {
            question: f.question.to_owned(),
            keywords: f.keywords.iter().map(|k| (*k).to_owned()).collect(),
            facet: Some(f.id),
            topic: Some(f.topic),
        }
    }

    /// A sub-question on a subject no facet covers; searches the whole corpus.
    pub fn free_form(subject: &str) -> Self {
        SubQuestion {
            question: format!(
                "What do the sources say about {}?",
                subject.trim_end_matches(['?', '.', '!'])
            ),
            keywords: terms(subject),
            facet: None,
            topic: None,
        }
    }

    /// Whether the sub-question is about any of `focus` (search terms).
    pub fn matches(&self, focus: &[String]) -> bool {
        match self.facet.and_then(facet) {
            Some(f) => score_facet(f, focus) > 0,
            None => self
                .keywords
                .iter()
                .any(|k| focus.iter().any(|t| term_matches(t, k))),
        }
    }
}

/// Facets ranked for `terms`: only topics scoring at least half the best
/// topic; score `4 * facet score + topic score`, ties in corpus order.
pub fn rank_facets(terms: &[String]) -> Vec<(&'static Facet, u32)> {
    let topic_scores: Vec<(&str, u32)> = TOPICS.iter().map(|t| (t.id, score_topic(t.id, terms))).collect();
    let best = topic_scores.iter().map(|(_, s)| *s).max().unwrap_or(0);
    if best == 0 {
        return Vec::new();
    }
    let topic_score = |id: &str| topic_scores.iter().find(|(t, _)| *t == id).map_or(0, |(_, s)| *s);
    let mut ranked: Vec<(usize, &'static Facet, u32)> = FACETS
        .iter()
        .enumerate()
        .filter(|(_, f)| 2 * topic_score(f.topic) >= best)
        .map(|(i, f)| (i, f, 4 * score_facet(f, terms) + topic_score(f.topic)))
        .collect();
    ranked.sort_by_key(|&(i, _, s)| (std::cmp::Reverse(s), i));
    ranked.into_iter().map(|(_, f, s)| (f, s)).collect()
}

/// The top-level plan for `question`: the `breadth` best facets, or one
/// free-form sub-question when no topic matches.
pub fn plan(question: &str, breadth: usize) -> Vec<SubQuestion> {
    let ranked = rank_facets(&terms(question));
    if ranked.is_empty() {
        return vec![SubQuestion::free_form(question)];
    }
    ranked
        .into_iter()
        .take(breadth)
        .map(|(f, _)| SubQuestion::from_facet(f))
        .collect()
}

/// Sub-questions to add for a focus: up to `n` matching facets not in
/// `exclude`, or one free-form sub-question if no facet matches at all.
pub fn plan_focus(focus: &str, exclude: &HashSet<&str>, n: usize) -> Vec<SubQuestion> {
    let t = terms(focus);
    let matching: Vec<&'static Facet> = rank_facets(&t)
        .into_iter()
        .filter(|(f, _)| score_facet(f, &t) > 0)
        .map(|(f, _)| f)
        .collect();
    if matching.is_empty() {
        return vec![SubQuestion::free_form(focus)];
    }
    matching
        .into_iter()
        .filter(|f| !exclude.contains(f.id))
        .take(n)
        .map(SubQuestion::from_facet)
        .collect()
}

/// The subject of a steer asking for a focus ("focus on X", "focus: X",
/// "concentrate on X", "only X"), if it asks for one.
pub fn focus_of(steer: &str) -> Option<String> {
    let lower = steer.trim().to_lowercase();
    let rest = ["focus on ", "focus:", "concentrate on ", "only "]
        .iter()
        .find_map(|p| lower.strip_prefix(p))?;
    let focus = rest.trim().trim_end_matches(['.', '!']).trim();
    (!focus.is_empty()).then(|| focus.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_unique_and_references_resolve() {
        let mut ids: Vec<&str> = DOCUMENTS
            .iter()
            .map(|d| d.id)
            .chain(FACETS.iter().map(|f| f.id))
            .collect();
        let n = ids.len();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), n, "duplicate ids");
        for f in FACETS.iter() {
            assert!(topic(f.topic).is_some(), "{} has an unknown topic", f.id);
            for fu in &f.follow_ups {
                assert!(facet(fu).is_some(), "{} follows up with unknown {fu}", f.id);
            }
            let kws: Vec<String> = f.keywords.iter().map(|k| (*k).to_owned()).collect();
            assert!(
                !search(&kws, Some(f.topic), 3).is_empty(),
                "facet {} finds nothing",
                f.id
            );
        }
        for d in DOCUMENTS.iter() {
            assert!(topic(d.topic).is_some(), "{} has an unknown topic", d.id);
        }
        assert!((20..=30).contains(&DOCUMENTS.len()));
    }

    #[test]
    fn terms_drop_stop_words_and_stem() {
        assert_eq!(
            terms("How do MCP tasks handle failures?"),
            ["mcp", "task", "handle", "failure"]
        );
        assert_eq!(
            terms("Why do batteries degrade when charging?"),
            ["battery", "degrade", "charg"]
        );
        assert_eq!(
            terms("tasks/result and long-running work"),
            ["tasks/result", "long-run"]
        );
        assert!(terms("what is it?").is_empty());
    }

    #[test]
    fn term_matching_is_substring_both_ways() {
        assert!(term_matches("failure", "fail"));
        assert!(term_matches("degrad", "degradation"));
        assert!(term_matches("battery", "battery"));
        assert!(!term_matches("remove", "rem"));
        assert!(!term_matches("cancellation", "cell"));
        assert!(term_matches("cancel", "cancellation"));
        assert!(!term_matches("ab", "abc"));
    }

    #[test]
    fn document_scores_weight_titles() {
        let d = document("tasks-04").unwrap();
        // One title hit (2) and one body hit (1).
        assert_eq!(score_document(d, &["delet".to_owned()]), 3);
        assert_eq!(score_document(d, &["ttl".to_owned()]), 2);
    }

    #[test]
    fn search_ranks_and_filters_by_topic() {
        let kws = vec!["cancel".to_owned()];
        let hits = search(&kws, None, 3);
        let top: Vec<&str> = hits.iter().take(2).map(|(d, _)| d.id).collect();
        assert_eq!(top, ["tasks-05", "async-03"], "a tie keeps corpus order");
        let hits = search(&kws, Some("mcp-tasks"), 3);
        assert_eq!(hits[0].0.id, "tasks-05");
        assert!(hits.iter().all(|(d, _)| d.topic == "mcp-tasks"));
        assert!(search(&["zebra".to_owned()], None, 3).is_empty());
    }

    #[test]
    fn excerpts_prefer_more_keywords_in_text_order() {
        let d = document("sleep-03").unwrap();
        let kw = |ks: &[&str]| ks.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>();
        let s = excerpt(&d.body, &kw(&["caffeine", "receptor"]), 1);
        assert!(s.starts_with("Caffeine blocks adenosine receptors"), "{s}");
        let s = excerpt(&d.body, &kw(&["pressure", "coffee"]), 2);
        assert!(
            s.starts_with("Adenosine builds up") && s.contains("afternoon coffee"),
            "{s}"
        );
        assert!(s.ends_with("at night."), "{s}");
        assert_eq!(excerpt("One. Two.", &kw(&["zebra"]), 2), "One.");
    }

    fn questions(plan: &[SubQuestion]) -> Vec<&str> {
        plan.iter().map(|s| s.facet.unwrap_or("free-form")).collect()
    }

    #[test]
    fn different_questions_plan_differently() {
        let p = plan("How do MCP tasks handle long-running work?", 3);
        assert_eq!(
            questions(&p),
            ["tasks-lifecycle", "tasks-ttl", "tasks-interaction"]
        );
        let p = plan("Why do batteries degrade, and are they a fire risk?", 3);
        assert_eq!(questions(&p)[..2], ["batt-degradation", "batt-safety"]);
        assert!(p.iter().all(|s| s.topic == Some("batteries")));
        let p = plan("Does coffee in the afternoon ruin my sleep?", 2);
        assert_eq!(questions(&p)[0], "sleep-caffeine");
        let p = plan("How does cancellation work with tokio::select?", 2);
        assert_eq!(questions(&p)[0], "async-cancel");
        let p = plan("What is the airspeed velocity of an unladen swallow?", 3);
        assert_eq!(questions(&p), ["free-form"]);
        assert!(p[0].question.starts_with("What do the sources say about"));
    }

    #[test]
    fn focus_parsing_and_matching() {
        assert_eq!(
            focus_of("Focus on failure handling.").as_deref(),
            Some("failure handling")
        );
        assert_eq!(focus_of("focus: costs").as_deref(), Some("costs"));
        assert_eq!(focus_of("only naps").as_deref(), Some("naps"));
        assert_eq!(focus_of("please hurry"), None);
        assert_eq!(focus_of("focus on "), None);
        let t = terms("failure handling");
        assert!(SubQuestion::from_facet(facet("tasks-failures").unwrap()).matches(&t));
        assert!(!SubQuestion::from_facet(facet("tasks-ttl").unwrap()).matches(&t));
        assert!(SubQuestion::free_form("failure modes").matches(&t));
    }

    #[test]
    fn focus_plans_skip_claimed_facets() {
        let none = HashSet::new();
        let add = plan_focus("failure handling", &none, 2);
        assert_eq!(add[0].facet, Some("tasks-failures"));
        let claimed: HashSet<&str> = ["tasks-failures"].into_iter().collect();
        assert!(
            plan_focus("failure handling", &claimed, 2)
                .iter()
                .all(|s| s.facet != Some("tasks-failures"))
        );
        let add = plan_focus("quantum gravity", &none, 2);
        assert_eq!(add.len(), 1);
        assert_eq!(add[0].facet, None);
    }

    #[test]
    fn facets_and_topics_score_questions() {
        let t = terms("Why do batteries catch fire?");
        assert!(score_topic("batteries", &t) > score_topic("sleep", &t));
        let fire = facet("batt-safety").unwrap();
        let cost = facet("batt-cost").unwrap();
        assert!(score_facet(fire, &t) > score_facet(cost, &t));
    }
}
