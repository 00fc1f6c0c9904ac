#include "job/elastic_rendezvous.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "common/logging.h"
#include "common/units.h"
#include "gradsync/error.h"
#include "job/agreement.h"

namespace gradsync {
namespace {

using MonotonicClock = std::chrono::steady_clock;

constexpr int kMostWorkers = 1024;
const std::string kNextRound = "elastic/next";  // the round a newcomer enters
const std::string kFinished = "elastic/done";   // > 0 once the job is over
const std::string kHeartbeat = "elastic/heartbeat";

std::string roundKey(int64_t round, const char* what) {
  return fmt::format("elastic/{}/{}", round, what);
}

std::string workerKey(int64_t round, int64_t index) {
  return fmt::format("elastic/{}/worker/{}", round, index);
}

// A counter's value without changing it (and without waiting: an absent counter is 0).
int64_t peek(Store& store, const std::string& key) {
  return store.add(key, 0);
}

std::string encodeWorker(const ElasticWorker& w) {
  return encodeSettings({{"name", w.name},
                         {"where", w.where},
                         {"slot", std::to_string(w.slot)},
                         {"progress", std::to_string(w.progress)},
                         {"last round", std::to_string(w.lastRound)},
                         {"last rank", std::to_string(w.lastRank)},
                         {"step us", std::to_string(std::llround(w.stepSeconds * 1e6))},
                         {"settings", w.settings}});
}

ElasticWorker decodeWorker(const std::string& bytes, const std::string& key) {
  Settings fields = decodeSettings(bytes);
  if (fields.size() != 8) {
    throw ProtocolError(
        fmt::format("store key {} holds {} fields, not a worker's 8", key, fields.size()));
  }
  auto number = [&](size_t i) { return parseInteger(fields[i].second, key); };
  ElasticWorker w;
  w.name = fields[0].second;
  w.where = fields[1].second;
  w.slot = static_cast<int>(number(2));
  w.progress = number(3);
  w.lastRound = number(4);
  w.lastRank = static_cast<int>(number(5));
  w.stepSeconds = static_cast<double>(number(6)) * 1e-6;
  w.settings = fields[7].second;
  return w;
}

std::string joinIndices(const std::vector<int64_t>& indices) {
  return fmt::format("{}", fmt::join(indices, ","));
}

std::vector<int64_t> splitIndices(const std::string& text, const std::string& key) {
  std::vector<int64_t> indices;
  for (size_t at = 0; at < text.size();) {
    size_t comma = text.find(',', at);
    if (comma == std::string::npos) comma = text.size();
    indices.push_back(parseInteger(text.substr(at, comma - at), key));
    at = comma + 1;
  }
  return indices;
}

// Why the job refuses a worker launched with other settings than the closer's (the job's).
std::string refusal(const ElasticWorker& job, const ElasticWorker& worker, int64_t round) {
  std::string difference;
  try {
    difference = describeDifference(decodeSettings(job.settings), decodeSettings(worker.settings),
                                    worker.name, "the job");
  } catch (const ProtocolError&) {
    difference = worker.name + "'s settings do not decode";
  }
  return fmt::format("elastic round {} refused {} ({}): {}", round, worker.name, worker.where,
                     difference);
}

// Rank order: the most advanced state first (rank 0 sends it), then the previous round's order,
// then fresh workers by their launch slot.
bool ranksBefore(const ElasticWorker& a, const ElasticWorker& b) {
  if (a.progress != b.progress) return a.progress > b.progress;
  if (a.lastRound != b.lastRound) return a.lastRound > b.lastRound;
  if (a.lastRank != b.lastRank) return a.lastRank < b.lastRank;
  return a.slot < b.slot;
}

}  // namespace

std::string ElasticRange::describe() const {
  return fmt::format("{}:{}", min, max);
}

ElasticRange parseElasticRange(const std::string& text) {
  if (text.empty()) return {};
  const ErrorContext context{.operation = "--elastic",
                             .hint = "give MIN:MAX workers, e.g. --elastic 3:4"};
  const size_t colon = text.find(':');
  if (colon == std::string::npos) {
    throw ConfigError(fmt::format("--elastic {} is not MIN:MAX", text), context);
  }
  ElasticRange range;
  range.min = static_cast<int>(parseInteger(text.substr(0, colon), "--elastic's MIN"));
  range.max = static_cast<int>(parseInteger(text.substr(colon + 1), "--elastic's MAX"));
  if (range.min < 1 || range.min > range.max || range.max > kMostWorkers) {
    throw ConfigError(
        fmt::format("--elastic {} is not a range 1 <= MIN <= MAX <= {}", text, kMostWorkers),
        context);
  }
  return range;
}

std::string describeMember(const ElasticWorker& worker, int rank) {
  return fmt::format("rank {} ({}, {})", rank, worker.name, worker.where);
}

// What the closer has seen of a round so far.
struct ElasticRendezvous::Arrivals {
  std::vector<ElasticWorker> workers;  // by arrival
  std::vector<bool> fits;              // by arrival: launched with the job's settings
  MonotonicClock::time_point last;     // when the latest came
  int64_t fitting() const { return std::count(fits.begin(), fits.end(), true); }
};

ElasticRendezvous::ElasticRendezvous(Store& store, ElasticRendezvousOptions options)
    : store_(store), options_(options) {
  const ElasticRange& range = options_.range;
  if (options_.initialWorkers < range.min || options_.initialWorkers > range.max) {
    throw ConfigError(fmt::format("{} workers were launched, outside --elastic {}",
                                  options_.initialWorkers, range.describe()),
                      {.operation = "elastic rendezvous",
                       .hint = "launch between MIN and MAX workers (WORLD_SIZE, -n, --workers)"});
  }
}

int64_t ElasticRendezvous::nextRound() {
  return peek(store_, kNextRound);
}

ElasticMembership ElasticRendezvous::join(int64_t round, const ElasticWorker& me) {
  for (int64_t r = round;; ++r) {
    const int64_t index = store_.add(roundKey(r, "arrived"), 1);
    store_.setString(workerKey(r, index), encodeWorker(me));
    // The previous round's members elect the closer among themselves: they are sure to come
    // and know the round they come from (a newcomer may wait while no regroup is under way).
    if (me.lastRound == r - 1 && store_.add(roundKey(r, "closer"), 1) == 1) close(r, me);
    const int64_t size = awaitVerdict(r);
    if (size == 0) return {.round = r, .jobFinished = true};
    if (std::optional<ElasticMembership> placed = placeIn(r, index)) return *placed;
    GS_LOG(kInfo, "{}: round {} formed with {} workers before this one came; waiting for round {}",
           me.name, r, size, r + 1);
  }
}

void ElasticRendezvous::close(int64_t round, const ElasticWorker& closer) {
  const ElasticRange& range = options_.range;
  const auto start = MonotonicClock::now();
  // Those who must come: the previous round's members (all of them when it ended to take a
  // worker in), or for round 0 the workers launched.
  const int64_t expected =
      round == 0 ? options_.initialWorkers : peek(store_, roundKey(round - 1, "size"));
  Arrivals arrivals{.last = start};
  auto beat = start;
  for (;;) {
    if (MonotonicClock::now() - beat >= std::chrono::milliseconds(100)) {
      heartbeat();  // the others wait for the verdict as long as a closer is at work
      beat = MonotonicClock::now();
    }
    const int64_t arrived = peek(store_, roundKey(round, "arrived"));
    while (static_cast<int64_t>(arrivals.workers.size()) < arrived) {
      arrivals.workers.push_back(record(round, static_cast<int64_t>(arrivals.workers.size()) + 1));
      // Round 0 has no job to compare with: its startup check names a difference to everyone.
      arrivals.fits.push_back(round == 0 || arrivals.workers.back().settings == closer.settings);
      arrivals.last = MonotonicClock::now();
    }
    const int64_t fitting = arrivals.fitting();
    int64_t fromPrevious = 0;
    double slowestStep = 0;
    for (size_t i = 0; i < arrivals.workers.size(); ++i) {
      if (arrivals.fits[i] && arrivals.workers[i].lastRound == round - 1) ++fromPrevious;
      slowestStep = std::max(slowestStep, arrivals.workers[i].stepSeconds);
    }
    const auto settle = std::max<MonotonicClock::duration>(
        options_.minSettle, std::chrono::duration_cast<MonotonicClock::duration>(
                                std::chrono::duration<double>(3 * slowestStep)));
    const auto now = MonotonicClock::now();
    const bool enough = fitting >= range.min;
    // Newcomers never complete a round early: the previous round's members, who hold the job's
    // state, all get their place first.
    const bool complete = fromPrevious >= expected || fromPrevious >= range.max;
    const bool settled = round > 0 && enough && now - arrivals.last >= settle;
    const bool late = now - start >= options_.timeout;
    if (complete || settled || (late && enough)) return publish(round, closer, arrivals);
    if (late) return fail(round, arrivals);
    std::this_thread::sleep_for(options_.poll);
  }
}

// The members (the fitting arrivals, up to MAX in rank order: workers with the job's state before
// newcomers, whenever they came) and the refused, before the size that tells everyone the round
// has formed.
void ElasticRendezvous::publish(int64_t round, const ElasticWorker& closer,
                                const Arrivals& arrivals) {
  std::vector<int64_t> members, refused;
  for (size_t i = 0; i < arrivals.workers.size(); ++i) {
    const auto index = static_cast<int64_t>(i) + 1;
    if (arrivals.fits[i]) {
      members.push_back(index);
      continue;
    }
    refused.push_back(index);
    const std::string why = refusal(closer, arrivals.workers[i], round);
    GS_LOG(kError, "{}", why);
    store_.setString(roundKey(round, "refusal/") + std::to_string(index), why);
  }
  std::stable_sort(members.begin(), members.end(), [&](int64_t a, int64_t b) {
    return ranksBefore(arrivals.workers[a - 1], arrivals.workers[b - 1]);
  });
  if (static_cast<int>(members.size()) > options_.range.max) members.resize(options_.range.max);
  std::sort(members.begin(), members.end());
  store_.setString(roundKey(round, "members"), joinIndices(members));
  store_.setString(roundKey(round, "refused"), joinIndices(refused));
  store_.setString(kNextRound, std::to_string(round + 1));
  store_.add(roundKey(round, "size"), static_cast<int64_t>(members.size()));
  GS_LOG(kInfo, "elastic round {} formed with {} workers", round, members.size());
}

// Names the previous round's members that did not come, and fails the round for everyone.
void ElasticRendezvous::fail(int64_t round, const Arrivals& arrivals) {
  const ElasticRange& range = options_.range;
  std::string verdict;
  if (round == 0) {
    verdict = fmt::format(
        "only {} of the {} workers launched came within {} ms, fewer than the "
        "minimum of --elastic {}",
        arrivals.fitting(), options_.initialWorkers, options_.timeout.count(), range.describe());
  } else {
    std::set<std::string> came;
    for (size_t i = 0; i < arrivals.workers.size(); ++i) {
      if (arrivals.fits[i]) came.insert(arrivals.workers[i].name);
    }
    const int64_t previousSize = peek(store_, roundKey(round - 1, "size"));
    std::vector<ElasticWorker> previous;
    for (int64_t i = 1; i <= previousSize; ++i) previous.push_back(record(round - 1, i));
    std::stable_sort(previous.begin(), previous.end(), ranksBefore);
    std::vector<std::string> lost;
    for (size_t rank = 0; rank < previous.size(); ++rank) {
      if (!came.count(previous[rank].name)) {
        lost.push_back(describeMember(previous[rank], static_cast<int>(rank)));
      }
    }
    verdict = fmt::format(
        "{} worker(s) came to round {} within {} ms, fewer than the minimum of --elastic {}: "
        "lost {} of the {} workers of round {}",
        arrivals.fitting(), round, options_.timeout.count(), range.describe(),
        fmt::join(lost, ", "), previousSize, round - 1);
  }
  store_.setString(roundKey(round, "verdict"), verdict);
  store_.add(roundKey(round, "size"), -1);
}

// Round 0 waits for workers that never started (a restart may bring them); a later round for a
// member of the one before, which holds the job's state: none left, the state is lost.
void ElasticRendezvous::throwNoRound(int64_t round) const {
  const std::string what = fmt::format(
      "elastic round {} did not form, and for {} ms no round trained and no worker formed one",
      round, options_.timeout.count());
  if (round == 0) {
    throw TimeoutError(what, {.operation = "elastic rendezvous",
                              .hint = "the job's workers were lost or never started; check "
                                      "their output"});
  }
  throw StateLostError(
      fmt::format("{}: only a member of round {} can form it (it holds the job's state; a "
                  "worker without it never starts the job over), and none is left",
                  what, round - 1),
      {.operation = "elastic rendezvous",
       .hint = "every worker holding the job's state was lost: resume the job from its "
               "checkpoint (--checkpoint-dir, --resume)"});
}

int64_t ElasticRendezvous::awaitVerdict(int64_t round) {
  auto lastSign = MonotonicClock::now();
  int64_t beats = peek(store_, kHeartbeat);
  for (;;) {
    const int64_t size = peek(store_, roundKey(round, "size"));
    if (size > 0) return size;
    if (size < 0) {
      const std::string verdict = store_.getString(roundKey(round, "verdict"), options_.timeout);
      const ErrorContext context{
          .operation = "elastic round " + std::to_string(round),
          .hint =
              "restart lost workers within --timeout (gradsync launch --max-restarts does), "
              "or let the job go on with fewer (a lower --elastic MIN)"};
      if (round == 0) throw TimeoutError(verdict, context);  // some never started
      throw PeerLostError(verdict, context);
    }
    if (peek(store_, kFinished) > 0) return 0;
    const int64_t now = peek(store_, kHeartbeat);
    if (now != beats) {
      beats = now;
      lastSign = MonotonicClock::now();
    }
    if (MonotonicClock::now() - lastSign > options_.timeout) throwNoRound(round);
    std::this_thread::sleep_for(options_.poll);
  }
}

std::optional<ElasticMembership> ElasticRendezvous::placeIn(int64_t round, int64_t index) {
  const std::string membersKey = roundKey(round, "members");
  const std::vector<int64_t> indices =
      splitIndices(store_.getString(membersKey, options_.timeout), membersKey);
  if (std::find(indices.begin(), indices.end(), index) == indices.end()) {
    const std::string refusedKey = roundKey(round, "refused");
    const std::vector<int64_t> refused =
        splitIndices(store_.getString(refusedKey, options_.timeout), refusedKey);
    if (std::find(refused.begin(), refused.end(), index) == refused.end()) return std::nullopt;
    throw ConfigError(
        store_.getString(roundKey(round, "refusal/") + std::to_string(index), options_.timeout),
        {.operation = "elastic rendezvous",
         .hint = "start a worker with the same settings as the running job's"});
  }
  std::vector<ElasticWorker> workers;
  for (int64_t i : indices) workers.push_back(record(round, i));
  std::vector<size_t> order(workers.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return ranksBefore(workers[a], workers[b]); });
  ElasticMembership membership{.round = round};
  for (size_t rank = 0; rank < order.size(); ++rank) {
    if (indices[order[rank]] == index) membership.rank = static_cast<int>(rank);
    membership.members.push_back(workers[order[rank]]);
  }
  return membership;
}

ElasticWorker ElasticRendezvous::record(int64_t round, int64_t index) {
  const std::string key = workerKey(round, index);
  return decodeWorker(store_.getString(key, options_.timeout), key);
}

int64_t ElasticRendezvous::waiting(int64_t round) {
  return peek(store_, roundKey(round + 1, "arrived"));
}

void ElasticRendezvous::heartbeat() {
  store_.add(kHeartbeat, 1);
}

void ElasticRendezvous::finish() {
  store_.add(kFinished, 1);
}

bool ElasticRendezvous::finished(Store& store) {
  return peek(store, kFinished) > 0;
}

}  // namespace gradsync
