----------------------------- MODULE VelosRestart -----------------------------
(***************************************************************************)
(* Velos's rule for an acceptor that restarts without its memory           *)
(* (docs/protocols/velos.md, "Restarting a replica (not in the paper)";    *)
(* crates/velos/src/recovery.rs): the restarted acceptor rejoins through a *)
(* decided log entry ("rejoin", as implemented), and the rule it replaced, *)
(* which read its peers' words ("abstain") and is unsound once             *)
(* configurations change ("Membership changes").                           *)
(* One slot word per acceptor, used by the log indices i, i +              *)
(* slots_count, i + 2 slots_count, ...: laps 0..MaxLap of one slot, each   *)
(* lap a separate instance of Paxos decided by remote compare-and-swaps    *)
(* (CAS) on the word.                                                      *)
(*                                                                         *)
(* A word is (lap, min proposal, accepted proposal, accepted value), or an *)
(* abstaining word (the lap up to which its acceptor abstains).  The value *)
(* is carried in the word (and in the CAS): the value indirection of       *)
(* section 5.2, with its value writes, tags and FIFO, is what Velos.tla    *)
(* checks, and it is left out here.  The "previous decided" bit is left    *)
(* out too.                                                                *)
(*                                                                         *)
(* Configurations: each log index is decided by its own configuration, a   *)
(* non-empty set of acceptors fixed by the membership entries decided      *)
(* before it.  The laps of one slot are slots_count indices apart, and any *)
(* number of membership entries may be decided between two of them, so     *)
(* with Reconfig = TRUE each lap's configuration is any non-empty subset   *)
(* of A, chosen by the first attempt that touches the lap (nothing depends *)
(* on it before).  With Reconfig = FALSE every lap's configuration is A.   *)
(* "A majority in lap L" is a majority of lap L's configuration.           *)
(*                                                                         *)
(* Recycling: a proposer may touch lap L + 1 of the slot only once lap L   *)
(* is chosen (accepted under one proposal by a majority in L; a proposer   *)
(* prepares index i only below its applied floor + slots_count, and what   *)
(* it applied was decided, hence chosen).  It may work on any lap that     *)
(* rule allows, an old one included (a new leader deciding again).         *)
(*                                                                         *)
(* A proposer's attempt at lap L: it asks only members of L's              *)
(* configuration.  It predicts their words as they are (the acceptors that *)
(* are down, recovering, are asked nothing), stops if a word is of a later *)
(* lap (stale), asks nothing of an acceptor whose word abstains in L, and  *)
(* needs a majority in L left to ask.  Its proposal b is its smallest one  *)
(* above every min proposal of lap L; it posts CAS(word, (L, b, accepted   *)
(* kept)) to each acceptor asked (a word of an earlier lap, or abstaining  *)
(* only below L, becomes a fresh word of lap L).  The answer that          *)
(* completes a majority in L ends the prepare: a failure aborts (an        *)
(* abstaining word's answer is no answer); otherwise the proposer adopts   *)
(* the value of the highest accepted proposal among the answers, or        *)
(* proposes its own, and posts CAS(predicted, (L, b, b, value)) to every   *)
(* acceptor it asked.  Whether that accept succeeds is seen in the history *)
(* (chosen), so the proposer stops waiting at once.  Answers after the     *)
(* majority point are not taken in (Velos.tla checks those, with the       *)
(* accept check, for one index).                                           *)
(*                                                                         *)
(* Operations are in flight per (proposer, acceptor) connection and land   *)
(* later, in the order posted, or never.  Operations of an abandoned       *)
(* attempt still land.  Proposers are apart from acceptors: a replica's    *)
(* proposer that crashes with it is a proposer that abandons its attempt   *)
(* at that moment, and its operations to the others may still land after   *)
(* the restart, as the design says they may.                               *)
(*                                                                         *)
(* Restart (acceptor a): a loses its word.  Operations posted to it before *)
(* never land, and a proposer whose attempt was under way posts nothing    *)
(* more to it in that attempt (its connection broke).  Then, by Rule:      *)
(*  - "abstain" (the rule replaced): a is down (recovering) while it reads *)
(*    the words of N - N \div 2 of the OTHER acceptors, one peer at a      *)
(*    time, at any moments, a peer that is recovering itself not being     *)
(*    readable.  Each word certifies a lap (accepted in lap l: l; prepared *)
(*    in lap l, nothing accepted: l - 1; the zero word: -1; abstaining up  *)
(*    to l: l).  a then comes back abstaining up to the newest certified   *)
(*    lap + 1.  The count makes every majority of A, less a, meet the      *)
(*    peers read: sound while every configuration is A, not once           *)
(*    configurations are smaller (Reconfig = TRUE), where the majority     *)
(*    that chose a lap may be one the peers read all miss;                 *)
(*  - "short" (mutation): the same, abstaining only up to the newest       *)
(*    certified lap (none, if that is -1);                                 *)
(*  - "forget" (mutation): a answers at once, its word zero;               *)
(*  - "rejoin" (as implemented, replacing "abstain"): a reads no peer.     *)
(*    It stays down (recovering) and asks the leader to decide a rejoin    *)
(*    entry naming it and its boot id.  DecideRejoin(a), at any moment     *)
(*    after the restart, is that entry being decided: it records the lap   *)
(*    up to which a will abstain, the newest lap chosen at that moment + 1 *)
(*    (lap 0 if none is chosen).  Later, ComeBack(a) (a has learnt the     *)
(*    entry's index by catching up) brings a back abstaining up to the     *)
(*    recorded lap; the proposers go on meanwhile.  Why: the entry is      *)
(*    decided at an index x after the restart (its value is created then), *)
(*    when every index below x is decided and none above it is accepted    *)
(*    yet (one accept in flight), so the newest chosen lap is that of the  *)
(*    slot's newest index below x, and the lap recorded is that of the     *)
(*    slot's index in [x, x + slots_count).  a's earlier lives took part   *)
(*    in lap L only if lap L - 1 was chosen before the crash (recycling),  *)
(*    so L is at most the recorded lap.  No peer is read, so no            *)
(*    configuration matters;                                               *)
(*  - "rejoinshort" (mutation): as "rejoin", recording only the newest     *)
(*    chosen lap (and coming back with the zero word, abstaining nowhere,  *)
(*    if none is chosen).                                                  *)
(*                                                                         *)
(* Refresh (acceptor a, its memory intact; at most MaxRefreshes in all): a *)
(* is fenced: it is down, what was posted to it never lands and the        *)
(* proposers under way post nothing more to it, exactly as at a restart,   *)
(* but its word is kept.  Then, by RefreshRule:                            *)
(*  - "others" (the rule replaced): a reads the words of N - N \div 2      *)
(*    OTHER acceptors,                                                     *)
(*    as a restarted one does, its own word not folded in, and comes back  *)
(*    abstaining up to the newest lap they certify + 1, its word replaced  *)
(*    by that abstaining word;                                             *)
(*  - "self" (a variant): a reads the words of N - N \div 2 - 1 OTHER      *)
(*    acceptors (one at a time, up peers only), folds in its own word as   *)
(*    it was at the fence (with them, a majority), and comes back          *)
(*    abstaining up to the newest lap they all certify + 1, its word       *)
(*    replaced by that abstaining word;                                    *)
(*  - "selfonly": the same from its own word alone (no peer read);         *)
(*  - "short" (mutation): as "self", abstaining only up to the newest      *)
(*    certified lap (nowhere, if that is -1);                              *)
(*  - "noself" (mutation): as "self", its own word not folded in (it reads *)
(*    the same N - N \div 2 - 1 others only, fewer than a majority);       *)
(*  - "rejoin" (as implemented, refresh_words in                          *)
(*    crates/replica/src/velos.rs): as a restarted                         *)
(*    acceptor under "rejoin": a reads no peer, a rejoin entry naming it   *)
(*    is decided (DecideRejoin, recording the newest chosen lap + 1), and  *)
(*    it comes back (ComeBack) with that abstaining word in place of its   *)
(*    kept word.  Its word took part only in laps touched before the       *)
(*    fence, and the same argument holds.                                  *)
(* A refreshing acceptor may restart: it loses its word then, and a rejoin *)
(* entry decided for it before no longer counts (it names the earlier      *)
(* life; the new life asks for its own).                                   *)
(*                                                                         *)
(* Properties: Agreement per lap (at most one value chosen for one index;  *)
(* chosen by a majority of the lap's configuration, as the lap is          *)
(* decided); RuleCovers, the rule's premise: a restarted acceptor abstains *)
(* in every lap its earlier lives took part in (an abstaining word read as *)
(* taking part up to its lap), and a refreshed one in every lap its word   *)
(* showed at the fence; TookCovered, where refreshes are modelled: an      *)
(* acceptor that came back abstains in every lap it ever actually took     *)
(* part in.  The rejoin rules are checked against the same properties:     *)
(* their premise is the read rule's, and only the lap they abstain up to   *)
(* is found in another way.                                                *)
(***************************************************************************)
EXTENDS Integers, FiniteSets, Sequences, TLC

CONSTANTS
    A,             \* the acceptors (model values, symmetric)
    Proposers,     \* the proposers' ids, in 1..N: their positions + 1
    Rounds,        \* proposal rounds per lap: proposer p's are r * N + p for r in 0..Rounds-1
    MaxLap,        \* laps 0..MaxLap of the slot
    MaxAttempts,   \* attempts in all (prepares started), over every proposer and lap
    MaxRestarts,   \* acceptor restarts in all
    Overlap,       \* TRUE: an acceptor may restart while another is still recovering
    Rule,          \* "rejoin" (as implemented), "abstain" (the rule it replaced), or
                   \* "short", "forget", "rejoinshort" (mutations)
    MaxRefreshes,  \* refreshes (fence, read or rejoin, abstain; memory intact) in all
    RefreshRule,   \* "rejoin" (as implemented), "others" (the rule it replaced),
                   \* "self", "selfonly" (variants), or "short", "noself" (mutations)
    Reconfig       \* TRUE: each lap's configuration is any non-empty subset of A; FALSE: A

N        == Cardinality(A)
ASSUME N > 0 /\ Proposers \subseteq 1..N
ASSUME Rounds \in Nat \ {0} /\ MaxLap \in Nat /\ MaxAttempts \in Nat /\ MaxRestarts \in Nat
ASSUME Overlap \in BOOLEAN
       /\ Rule \in {"abstain", "short", "forget", "rejoin", "rejoinshort"}
ASSUME MaxRefreshes \in Nat
       /\ RefreshRule \in {"others", "self", "selfonly", "short", "noself", "rejoin"}
ASSUME Reconfig \in BOOLEAN

\* Whether the restart, or the refresh, goes through a decided rejoin entry (reading no peer).
Rejoins        == Rule \in {"rejoin", "rejoinshort"}
RefreshRejoins == RefreshRule = "rejoin"

\* A majority of the configuration C (a majority in a lap is one of that lap's configuration).
IsMajorityOf(Q, C) == 2 * Cardinality(Q \cap C) > Cardinality(C)

Laps     == 0..MaxLap
\* An attempt's own value is its number: the values of different attempts differ.  0: none.
Values   == 1..MaxAttempts
Own(p)   == {r * N + p : r \in 0..(Rounds - 1)}
Ballots  == {0} \cup UNION {Own(p) : p \in Proposers}
Max(S)   == CHOOSE x \in S : \A y \in S : y <= x
Min(S)   == CHOOSE x \in S : \A y \in S : x <= y

\* A slot word.  abs = FALSE: the acceptor's state for lap `lap` (min proposal, accepted
\* proposal, accepted value).  abs = TRUE: the acceptor abstains in every lap up to `lap`
\* included, and is fresh for later ones (the other fields are 0).
Words    == [abs : BOOLEAN, lap : 0..(MaxLap + 1), min : Ballots, acc : Ballots,
             val : Values \cup {0}]
Zero     == [abs |-> FALSE, lap |-> 0, min |-> 0, acc |-> 0, val |-> 0]
Abstain(l) == [abs |-> TRUE, lap |-> l, min |-> 0, acc |-> 0, val |-> 0]
\* The word of an acceptor that is recovering (its connections are down: nobody can use it),
\* and what a proposer predicts for an acceptor it does not ask: abstaining in every lap.
Lost     == Abstain(MaxLap + 1)

\* How a word relates to lap L (crates/velos/src/word.rs, SlotWord::view).
View(w, L) == IF w.abs THEN (IF L <= w.lap THEN "abstains" ELSE "fresh")
              ELSE IF w.lap = L THEN "current"
              ELSE IF w.lap < L THEN "fresh"
              ELSE "newer"

\* The lap a word certifies its acceptor accepted in no later than (recovery.rs, certified).
Cert(w) == IF w.abs \/ w.acc # 0 THEN w.lap
           ELSE IF w = Zero THEN -1
           ELSE w.lap - 1

\* The word a restarted acceptor comes back with, from the newest certified lap c (the read
\* rules), or from the newest lap c chosen when its rejoin entry is decided (the rejoin rules).
\* A lap past MaxLap is capped at MaxLap, which abstains in the same modelled laps.
Marker(c) == IF Rule \in {"abstain", "rejoin"} THEN Abstain(Min({c + 1, MaxLap}))
             ELSE IF c < 0 THEN Zero      \* "short", "rejoinshort", nothing: abstains nowhere
             ELSE Abstain(c)

\* How many OTHER acceptors a restart under a read rule reads (step 2 of the design): enough to
\* meet every majority of A less the restarted acceptor (2 of the others with 3 or 4
\* acceptors), whatever the configurations.
RestartReads == N - N \div 2

\* A refresh: how many OTHER acceptors it reads (none under "selfonly" and "rejoin"), the
\* certificate it starts from (its own word folded in, or not), and the word it comes back with
\* from the newest certified lap c, or under "rejoin" the newest lap c chosen when its rejoin
\* entry is decided.
RefreshReads == CASE RefreshRule \in {"selfonly", "rejoin"} -> 0
                  [] RefreshRule = "others" -> N - N \div 2
                  [] OTHER -> N - N \div 2 - 1
RefreshCert0(w) == IF RefreshRule \in {"noself", "others"} THEN -1 ELSE Cert(w)
RefreshMarker(c) == IF RefreshRule = "short"
                      THEN (IF c < 0 THEN Zero ELSE Abstain(c))
                    ELSE Abstain(Min({c + 1, MaxLap}))

\* An operation in flight: the prepare ("p") or accept ("a") CAS from expected word e to
\* desired word d; c: whether its poster still waits for its result.
Ops == [k : {"p", "a"}, e : Words, d : Words, c : BOOLEAN]

VARIABLES
    \* ---- configurations ----
    conf,      \* conf[L]: lap L's configuration ({}: not chosen yet; A for every lap unless
               \* Reconfig)
    \* ---- acceptors ----
    word,      \* word[a]: a's slot word (Lost while a recovers)
    status,    \* status[a]: "up", or "rec" (restarted, reading its peers or waiting for its
               \* rejoin entry, down to the others), or "ref" (refreshing: fenced, its word
               \* kept, reading its peers or waiting for its rejoin entry)
    rd,        \* rd[a]: the peers a has read so far in its recovery or refresh
    cert,      \* cert[a]: the newest lap the words read so far certify (-1: none)
    mark,      \* mark[a]: the word a comes back with, recorded when its rejoin entry is
               \* decided (Lost: none decided for this recovery or refresh, or a is up)
    restarts,  \* restarts so far
    refreshes, \* refreshes so far
    \* ---- proposers ----
    attempts,  \* attempts started so far
    phase,     \* phase[p]: "idle" or "prep" (prepare CASes posted, waiting for a majority)
    lap,       \* lap[p]: the lap p works on (0 when idle)
    bal,       \* bal[p]: p's proposal (0 when idle)
    val,       \* val[p]: the own value of p's attempt (0 when idle)
    pred,      \* pred[p][a]: the word p predicts at a (Lost: a not asked)
    ans,       \* ans[p][a]: the result of p's prepare CAS to a
    broken,    \* broken[p]: the acceptors that restarted during p's attempt (its connection
               \* to them broke): p posts nothing more to them in this attempt
    \* ---- the network ----
    net,       \* net[p][a]: p's CASes to a in flight, oldest first
    \* ---- history, for the properties only ----
    accepted,  \* every accept that took effect: <<lap, acceptor, proposal, value>>
    forgot,    \* forgot[a]: the newest lap a's earlier lives touched (-1: none); while a
               \* refreshes, the newest lap its word showed it took part in at the fence
    uncovered, \* whether some acceptor came back (from a restart or a refresh) without
               \* abstaining in a lap it forgot, or its word showed at its refresh
    took,      \* took[a]: the newest lap a ever took part in (a prepare or accept landed on
               \* it), over all its lives (-1: none); kept only where refreshes are modelled
    lapsed     \* whether some acceptor came back (from a restart or a refresh) without
               \* abstaining in a lap it took part in; kept only where refreshes are modelled

acceptorVars == <<word, status, rd, cert, mark, restarts, refreshes>>
proposerVars == <<attempts, phase, lap, bal, val, pred, ans, broken>>
vars == <<conf, acceptorVars, proposerVars, net, accepted, forgot, uncovered, took, lapsed>>

\* took and lapsed are history for TookCovered, kept only where refreshes are modelled (they stay
\* -1 and FALSE otherwise, so that the restart-only models keep their state spaces).
Track == MaxRefreshes > 0

TypeOK ==
    /\ conf \in [Laps -> SUBSET A]
    /\ Reconfig \/ conf = [L \in Laps |-> A]
    /\ word \in [A -> Words]
    /\ \A a \in A : word[a].acc <= word[a].min
    /\ status \in [A -> {"up", "rec", "ref"}]
    /\ \A a \in A : status[a] = "rec" <=> word[a] = Lost
    /\ rd \in [A -> SUBSET A]
    /\ \A a \in A : a \notin rd[a]
    /\ cert \in [A -> -1..MaxLap]
    /\ mark \in [A -> Words]
    /\ \A a \in A : status[a] = "up" => mark[a] = Lost
    /\ restarts \in 0..MaxRestarts
    /\ refreshes \in 0..MaxRefreshes
    /\ attempts \in 0..MaxAttempts
    /\ phase \in [Proposers -> {"idle", "prep"}]
    /\ lap \in [Proposers -> Laps]
    /\ bal \in [Proposers -> Ballots]
    /\ val \in [Proposers -> Values \cup {0}]
    /\ pred \in [Proposers -> [A -> Words]]
    /\ ans \in [Proposers -> [A -> {"none", "ok", "fail"}]]
    /\ broken \in [Proposers -> SUBSET A]
    /\ \A p \in Proposers : \A a \in A : \A i \in 1..Len(net[p][a]) : net[p][a][i] \in Ops
    /\ accepted \subseteq Laps \X A \X Ballots \X Values
    /\ forgot \in [A -> -1..MaxLap]
    /\ uncovered \in BOOLEAN
    /\ took \in [A -> -1..MaxLap]
    /\ lapsed \in BOOLEAN

Init ==
    /\ conf = [L \in Laps |-> IF Reconfig THEN {} ELSE A]
    /\ word = [a \in A |-> Zero]
    /\ status = [a \in A |-> "up"]
    /\ rd = [a \in A |-> {}]
    /\ cert = [a \in A |-> -1]
    /\ mark = [a \in A |-> Lost]
    /\ restarts = 0
    /\ refreshes = 0
    /\ attempts = 0
    /\ phase = [p \in Proposers |-> "idle"]
    /\ lap = [p \in Proposers |-> 0]
    /\ bal = [p \in Proposers |-> 0]
    /\ val = [p \in Proposers |-> 0]
    /\ pred = [p \in Proposers |-> [a \in A |-> Lost]]
    /\ ans = [p \in Proposers |-> [a \in A |-> "none"]]
    /\ broken = [p \in Proposers |-> {}]
    /\ net = [p \in Proposers |-> [a \in A |-> <<>>]]
    /\ accepted = {}
    /\ forgot = [a \in A |-> -1]
    /\ uncovered = FALSE
    /\ took = [a \in A |-> -1]
    /\ lapsed = FALSE

-----------------------------------------------------------------------------
(* Helpers.                                                                *)

\* The values chosen in lap L: accepted under one proposal by a majority of lap L's
\* configuration, which is what decides that lap's index (history: acceptances that a restart
\* erased still count).  Only members are asked, so only they accept.
ChosenIn(L) == {x[4] : x \in {y \in accepted : y[1] = L /\
                   IsMajorityOf({a \in A : <<L, a, y[3], y[4]>> \in accepted}, conf[L])}}

\* The newest lap chosen so far (-1: none).
NewestChosen == Max({-1} \cup {L \in Laps : ChosenIn(L) # {}})

\* The configurations an attempt at lap L may find: the one chosen by the lap's first attempt,
\* or, for a lap nobody has touched yet, any non-empty subset of A.
Confs(L) == IF conf[L] # {} THEN {conf[L]} ELSE (SUBSET A) \ {{}}

\* Words of one life of an acceptor only move forward in this order (a prepare raises the lap or
\* the min proposal; an accept raises the lap, or keeps the min proposal and does not lower the
\* accepted one): an abstaining or zero word comes first, and is never seen again.
Rank(w) == IF w.abs THEN <<w.lap, -1, -1>> ELSE <<w.lap, w.min, w.acc>>
Before(x, y) == \/ x[1] < y[1]
                \/ x[1] = y[1] /\ x[2] < y[2]
                \/ x[1] = y[1] /\ x[2] = y[2] /\ x[3] < y[3]

\* A CAS nobody waits for whose expected word the acceptor's word w has passed can only land and
\* fail, with no effect.  It is dropped at once, which only merges states (the operations behind
\* it still land after those ahead of it).
Doomed(op, w) == ~op.c /\ Before(Rank(op.e), Rank(w))
Prune(s, w) ==
    LET keep   == {i \in 1..Len(s) : ~Doomed(s[i], w)}
        kth(k) == CHOOSE i \in keep : Cardinality({j \in keep : j <= i}) = k
    IN [k \in 1..Cardinality(keep) |-> s[kth(k)]]

\* The operations in flight n[p] of p, none of them awaited any more, with the words w.
StaleIn(n, w, p) ==
    [a \in A |-> Prune([i \in 1..Len(n[p][a]) |-> [n[p][a][i] EXCEPT !.c = FALSE]], w[a])]

\* p's attempt is over (aborted, or its accept posted): it waits for nothing and keeps nothing
\* (a new attempt predicts afresh).
IdleVars(p) ==
    /\ phase' = [phase EXCEPT ![p] = "idle"]
    /\ lap' = [lap EXCEPT ![p] = 0]
    /\ bal' = [bal EXCEPT ![p] = 0]
    /\ val' = [val EXCEPT ![p] = 0]
    /\ pred' = [pred EXCEPT ![p] = [a \in A |-> Lost]]
    /\ ans' = [ans EXCEPT ![p] = [a \in A |-> "none"]]
    /\ broken' = [broken EXCEPT ![p] = {}]

-----------------------------------------------------------------------------
(* Proposer p.                                                             *)

\* A new attempt at lap L, at any moment (first, retry, a leader giving up waiting, a new leader,
\* a restarted replica's proposer), with a new value.  Lap L > 0 only once lap L - 1 is chosen
\* (recycling).  p asks only members of lap L's configuration C (the first attempt at a lap fixes
\* it: an attempt that waits or stops has no effect, so fixing it no earlier loses nothing).  p
\* predicts their words as they are, once its own operations have landed (a fetch lands behind
\* them); an acceptor that is down is asked nothing.
Start(p, L) ==
    /\ attempts < MaxAttempts
    /\ L = 0 \/ ChosenIn(L - 1) # {}
    /\ \A a \in A : net[p][a] = <<>>
    /\ \E C \in Confs(L) :
       LET up    == {a \in C : status[a] = "up"}
           asked == {a \in up : View(word[a], L) \in {"current", "fresh"}}
           floor == Max({0} \cup {word[a].min : a \in {x \in up : View(word[x], L) = "current"}})
           cands == {b \in Own(p) : b > floor}
       IN
       /\ \A a \in up : View(word[a], L) # "newer"   \* otherwise p is stale: it stops
       /\ IsMajorityOf(asked, C)                     \* otherwise p waits
       /\ cands # {}                                 \* otherwise p's proposals are exhausted
       /\ conf' = [conf EXCEPT ![L] = C]
       /\ LET b == Min(cands)
              new(a) == IF View(word[a], L) = "current" THEN [word[a] EXCEPT !.min = b]
                        ELSE [abs |-> FALSE, lap |-> L, min |-> b, acc |-> 0, val |-> 0]
              cas(a) == [k |-> "p", e |-> word[a], d |-> new(a), c |-> TRUE]
          IN
          /\ net' = [net EXCEPT ![p] = [a \in A |-> IF a \in asked THEN <<cas(a)>> ELSE <<>>]]
          /\ pred' = [pred EXCEPT ![p] = [a \in A |-> IF a \in asked THEN new(a) ELSE Lost]]
          /\ bal' = [bal EXCEPT ![p] = b]
    /\ attempts' = attempts + 1
    /\ phase' = [phase EXCEPT ![p] = "prep"]
    /\ lap' = [lap EXCEPT ![p] = L]
    /\ val' = [val EXCEPT ![p] = attempts + 1]
    /\ ans' = [ans EXCEPT ![p] = [a \in A |-> "none"]]
    /\ broken' = [broken EXCEPT ![p] = {}]
    /\ UNCHANGED <<acceptorVars, accepted, forgot, uncovered, took, lapsed>>

\* The answer that completes a majority (of the lap's configuration) ends p's prepare at once (as
\* the proposer settles on each answer), given the answers an, the operations in flight n and the
\* words w after it landed.  A failure aborts.  Otherwise p adopts the value of the highest
\* accepted proposal among the answers (from any answer that reported it), or takes its own, and
\* posts the accept CAS, from the word it predicts, to every acceptor it asked whose connection did
\* not break; it waits for nothing more.
Conclude(p, an, n, w) ==
    /\ IF \E a \in A : an[a] = "fail"
         THEN net' = [n EXCEPT ![p] = StaleIn(n, w, p)]
       ELSE LET oks == {a \in A : an[a] = "ok"}
                hb  == Max({pred[p][a].acc : a \in oks})
                L   == lap[p]
                b   == bal[p]
            IN
            \E v \in IF hb = 0 THEN {val[p]}
                     ELSE {pred[p][a].val : a \in {x \in oks : pred[p][x].acc = hb}} :
              LET d  == [abs |-> FALSE, lap |-> L, min |-> b, acc |-> b, val |-> v]
                  to == {a \in A \ broken[p] : View(pred[p][a], L) = "current"
                                               /\ pred[p][a].min <= b}   \* the accept check
                  op(a) == [k |-> "a", e |-> pred[p][a], d |-> d, c |-> FALSE]
              IN
              net' = [n EXCEPT ![p] =
                        [a \in A |-> IF a \in to THEN Append(StaleIn(n, w, p)[a], op(a))
                                     ELSE StaleIn(n, w, p)[a]]]
    /\ IdleVars(p)

-----------------------------------------------------------------------------
(* The network.                                                            *)

\* p's oldest CAS in flight to a lands.  Its result, if p still waits for it, is p's answer: a
\* success, a refusal, or no answer from a word that abstains in the CAS's lap.  The answer that
\* completes a majority of the lap's configuration ends the prepare (Conclude).
Deliver(p, a) ==
    /\ net[p][a] # <<>>
    /\ status[a] = "up"
    /\ LET op == Head(net[p][a])
           ok == word[a] = op.e
           w  == [word EXCEPT ![a] = IF ok THEN op.d ELSE @]
           rest == [net EXCEPT ![p][a] = Tail(@)]
           n  == IF ok THEN [q \in Proposers |-> [rest[q] EXCEPT ![a] = Prune(@, w[a])]]
                 ELSE rest
           an == [ans[p] EXCEPT ![a] = IF ok THEN "ok"
                                       ELSE IF View(word[a], op.d.lap) = "abstains" THEN "none"
                                       ELSE "fail"]
       IN
       /\ word' = w
       /\ accepted' = IF ok /\ op.k = "a"
                      THEN accepted \cup {<<op.d.lap, a, op.d.acc, op.d.val>>}
                      ELSE accepted
       /\ took' = IF Track /\ ok THEN [took EXCEPT ![a] = Max({@, op.d.lap})] ELSE took
       /\ IF op.c /\ IsMajorityOf({x \in A : an[x] # "none"}, conf[lap[p]])
            THEN Conclude(p, an, n, w)
          ELSE /\ net' = n
               /\ ans' = IF op.c THEN [ans EXCEPT ![p] = an] ELSE ans
               /\ UNCHANGED <<phase, lap, bal, val, pred, broken>>
    /\ UNCHANGED <<conf, status, rd, cert, mark, restarts, refreshes, attempts, forgot, uncovered,
                   lapsed>>

-----------------------------------------------------------------------------
(* Acceptors: restart and recovery.                                        *)

\* The laps a word shows its acceptor took part in, in this life or (an abstaining word) in its
\* earlier ones, as far as the rule covers them: up to this lap (-1: none).
Covered(w) == IF w = Zero THEN -1 ELSE w.lap

\* Whether a comes back with word m without abstaining in a lap it ever took part in (history,
\* for TookCovered; FALSE where it is not kept).
Lapses(a, m) == Track /\ took[a] >= 0 /\ ~(m.abs /\ took[a] <= m.lap)

\* a restarts without its memory.  What was posted to it never lands, and the proposers waiting
\* on it post nothing more to it in their attempts.  forgot[a]: the laps its earlier lives took
\* part in, up to this one (history; if a restarts while recovering, its earlier lives are those
\* of the recovery it did not finish).  A rejoin entry decided for an earlier life (of this
\* recovery or of a refresh) names that life's boot id: the new life does not count it, and asks
\* for its own.
Restart(a) ==
    /\ restarts < MaxRestarts
    /\ Overlap \/ \A x \in A \ {a} : status[x] = "up"
    /\ restarts' = restarts + 1
    /\ net' = [p \in Proposers |-> [net[p] EXCEPT ![a] = <<>>]]
    /\ broken' = [p \in Proposers |-> IF phase[p] = "prep" THEN broken[p] \cup {a} ELSE {}]
    /\ IF Rule = "forget"
         THEN /\ word' = [word EXCEPT ![a] = Zero]
              /\ status' = [status EXCEPT ![a] = "up"]
              /\ uncovered' = (uncovered \/ Covered(word[a]) >= 0)
              /\ lapsed' = (lapsed \/ Lapses(a, Zero))
              /\ UNCHANGED forgot
       ELSE /\ word' = [word EXCEPT ![a] = Lost]
              /\ status' = [status EXCEPT ![a] = "rec"]
              /\ forgot' = [forgot EXCEPT ![a] = IF status[a] = "rec" THEN @
                                                 ELSE Covered(word[a])]
              /\ UNCHANGED <<uncovered, lapsed>>
    /\ rd' = [rd EXCEPT ![a] = {}]
    /\ cert' = [cert EXCEPT ![a] = -1]
    /\ mark' = [mark EXCEPT ![a] = Lost]
    /\ UNCHANGED <<conf, refreshes, attempts, phase, lap, bal, val, pred, ans, accepted, took>>

\* Under a read rule, recovering a reads the word of peer x, which is up (a recovering peer
\* cannot be read).  Once it has read RestartReads others, it comes back in the same step, with
\* its marker word, and lets peers in.  (Coming back later only leaves out states in which it is
\* down longer than it needs to be.)  RuleCovers then checks the rule's premise.
ReadPeer(a, x) ==
    /\ ~Rejoins
    /\ status[a] = "rec"
    /\ x # a /\ x \notin rd[a]
    /\ status[x] = "up"
    /\ LET r == rd[a] \cup {x}
           c == Max({cert[a], Cert(word[x])})
       IN
       IF Cardinality(r) >= RestartReads
         THEN /\ word' = [word EXCEPT ![a] = Marker(c)]
              /\ status' = [status EXCEPT ![a] = "up"]
              /\ rd' = [rd EXCEPT ![a] = {}]
              /\ cert' = [cert EXCEPT ![a] = -1]
              /\ forgot' = [forgot EXCEPT ![a] = -1]
              /\ uncovered' = (uncovered \/ (forgot[a] >= 0 /\ ~(Marker(c).abs
                                                               /\ forgot[a] <= Marker(c).lap)))
              /\ lapsed' = (lapsed \/ Lapses(a, Marker(c)))
       ELSE /\ rd' = [rd EXCEPT ![a] = r]
            /\ cert' = [cert EXCEPT ![a] = c]
            /\ UNCHANGED <<word, status, forgot, uncovered, lapsed>>
    /\ UNCHANGED <<conf, mark, restarts, refreshes, proposerVars, net, accepted, took>>

-----------------------------------------------------------------------------
(* Acceptors: rejoining through a decided log entry.                      *)

\* The rejoin entry naming a (a restarted acceptor under "rejoin" or "rejoinshort", or a
\* refreshing one under RefreshRule "rejoin") is decided, at any moment after the restart or the
\* fence: every index below the entry's is decided and none above it is accepted yet, so this
\* slot's newest decided lap is the newest chosen one, NewestChosen.  (If the entry's index is
\* itself one of this slot's, its lap is the one recorded: the step just before that lap is
\* chosen.)  It records the word a will come back with.  No acceptor is read, and nothing else
\* changes: a stays down, and the proposers go on.  Needing no leader and no majority only adds
\* behaviours.
DecideRejoin(a) ==
    /\ \/ status[a] = "rec" /\ Rejoins
       \/ status[a] = "ref" /\ RefreshRejoins
    /\ mark[a] = Lost
    /\ mark' = [mark EXCEPT ![a] = IF status[a] = "rec" THEN Marker(NewestChosen)
                                   ELSE RefreshMarker(NewestChosen)]
    /\ UNCHANGED <<conf, word, status, rd, cert, restarts, refreshes, proposerVars, net, accepted,
                   forgot, uncovered, took, lapsed>>

\* a, whose rejoin entry is decided, has learnt its index by catching up: it comes back with the
\* word recorded then (in place of its kept word, after a refresh) and lets peers in.  RuleCovers
\* checks that it abstains in every lap its earlier lives took part in, or its word showed at the
\* fence (forgot[a], set at the restart or the fence).
ComeBack(a) ==
    /\ status[a] \in {"rec", "ref"}
    /\ mark[a] # Lost
    /\ word' = [word EXCEPT ![a] = mark[a]]
    /\ status' = [status EXCEPT ![a] = "up"]
    /\ mark' = [mark EXCEPT ![a] = Lost]
    /\ forgot' = [forgot EXCEPT ![a] = -1]
    /\ uncovered' = (uncovered \/ (forgot[a] >= 0 /\ ~(mark[a].abs /\ forgot[a] <= mark[a].lap)))
    /\ lapsed' = (lapsed \/ Lapses(a, mark[a]))
    /\ UNCHANGED <<conf, rd, cert, restarts, refreshes, proposerVars, net, accepted, took>>

-----------------------------------------------------------------------------
(* Acceptors: refresh (memory intact).                                     *)

\* a, up and with its memory, comes back from a refresh whose newest certified lap is c: its
\* word is replaced by the refresh's marker word; RuleCovers checks it abstains in every lap its
\* word showed it took part in at the fence (forgot[a]).
RefreshBack(a, c) ==
    /\ word' = [word EXCEPT ![a] = RefreshMarker(c)]
    /\ status' = [status EXCEPT ![a] = "up"]
    /\ rd' = [rd EXCEPT ![a] = {}]
    /\ cert' = [cert EXCEPT ![a] = -1]
    /\ forgot' = [forgot EXCEPT ![a] = -1]
    /\ uncovered' = (uncovered \/ (Covered(word[a]) >= 0
                                   /\ ~(RefreshMarker(c).abs
                                        /\ Covered(word[a]) <= RefreshMarker(c).lap)))
    /\ lapsed' = (lapsed \/ Lapses(a, RefreshMarker(c)))
    /\ UNCHANGED mark

\* a is fenced: like a restart, what was posted to it never lands and the proposers waiting on it
\* post nothing more to it in their attempts; its word is kept.  With no peer to read
\* ("selfonly"), it comes back in the same step; under "rejoin", it waits for its rejoin entry
\* (DecideRejoin, ComeBack).
Refresh(a) ==
    /\ refreshes < MaxRefreshes
    /\ status[a] = "up"
    /\ refreshes' = refreshes + 1
    /\ net' = [p \in Proposers |-> [net[p] EXCEPT ![a] = <<>>]]
    /\ broken' = [p \in Proposers |-> IF phase[p] = "prep" THEN broken[p] \cup {a} ELSE {}]
    /\ IF RefreshReads = 0 /\ ~RefreshRejoins
         THEN RefreshBack(a, RefreshCert0(word[a]))
       ELSE /\ status' = [status EXCEPT ![a] = "ref"]
            /\ rd' = [rd EXCEPT ![a] = {}]
            /\ cert' = [cert EXCEPT ![a] = RefreshCert0(word[a])]
            /\ forgot' = [forgot EXCEPT ![a] = Covered(word[a])]
            /\ UNCHANGED <<word, mark, uncovered, lapsed>>
    /\ UNCHANGED <<conf, restarts, attempts, phase, lap, bal, val, pred, ans, accepted, took>>

\* Refreshing a reads the word of peer x, which is up.  Once it has read RefreshReads others, it
\* comes back in the same step, from the newest lap they and (unless "noself") its own word
\* certify.
RefreshRead(a, x) ==
    /\ ~RefreshRejoins
    /\ status[a] = "ref"
    /\ x # a /\ x \notin rd[a]
    /\ status[x] = "up"
    /\ LET r == rd[a] \cup {x}
           c == Max({cert[a], Cert(word[x])})
       IN
       IF Cardinality(r) >= RefreshReads
         THEN RefreshBack(a, c)
       ELSE /\ rd' = [rd EXCEPT ![a] = r]
            /\ cert' = [cert EXCEPT ![a] = c]
            /\ UNCHANGED <<word, status, mark, forgot, uncovered, lapsed>>
    /\ UNCHANGED <<conf, restarts, refreshes, proposerVars, net, accepted, took>>

-----------------------------------------------------------------------------

Next ==
    \/ \E p \in Proposers :
          \/ \E L \in Laps : Start(p, L)
          \/ \E a \in A : Deliver(p, a)
    \/ \E a \in A :
          \/ Restart(a)
          \/ \E x \in A : ReadPeer(a, x)
          \/ Refresh(a)
          \/ \E x \in A : RefreshRead(a, x)
          \/ DecideRejoin(a)
          \/ ComeBack(a)

Spec == Init /\ [][Next]_vars

\* Acceptors are interchangeable.
Sym == Permutations(A)

-----------------------------------------------------------------------------
(* Properties.                                                             *)

\* Agreement: for each lap (each log index using the slot), at most one value is chosen.  Chosen
\* is counted in the lap's own configuration (ChosenIn): a majority of it decides the index.
\* With Reconfig, such a majority need not be one of A, and a majority of A need not hold one.
Agreement == \A L \in Laps : Cardinality(ChosenIn(L)) <= 1

\* The rule's premise (recovery.rs): an acceptor that came back abstains in every lap its earlier
\* lives took part in; one that came back from a refresh, in every lap its word showed it took
\* part in at the fence.  It speaks of laps only, not of configurations, and holds the rejoin
\* rules to the same premise as the read rules: they differ only in how they find the lap to
\* abstain up to.  (An abstaining word of an earlier life, read as taking part up to its lap, is
\* covered under "rejoin" too: it was recorded as a newest chosen lap + 1, and the lap chosen
\* only grows.)
RuleCovers == ~uncovered

\* The premise on what acceptors actually did (kept where refreshes are modelled): an acceptor that
\* came back, from a restart or a refresh, abstains in every lap it ever took part in.  RuleCovers
\* reads an abstaining word as its acceptor having taken part up to its lap; after a refresh
\* (abstaining one lap past its own word, a lap it never took part in) a restart that reads older
\* words may come back abstaining below that lap, and RuleCovers fails though no lap the
\* acceptor took part in is left uncovered.  TookCovered is the premise the rule needs.
TookCovered == ~lapsed

=============================================================================
