// MOT metrics — how well tracks follow the ground truth, with the definitions of the MOT Challenge as TrackEval computes
// them (boxes compared by IoU):
//   CLEAR: per frame, ground truth and tracks matched one to one at IoU ≥ 0.5, a pair matched in the previous frame
//     kept when it still qualifies (then the most IoU); TP, FN, FP; an identity switch when a ground-truth object is
//     matched to another track than the one it was last matched to. MOTA = (TP − FP − IDSW) / #gt, MOTP = mean IoU
//     of the TPs.
//   Identity: one global one-to-one matching of ground-truth ids to track ids maximising the frames where the two
//     overlap at IoU ≥ 0.5 (IDTP). IDF1 = 2·IDTP / (#gt + #tracker), IDP, IDR.
//   HOTA: for α = 0.05, 0.10, …, 0.95, per frame the matching that maximises the global alignment score × IoU, pairs
//     with IoU ≥ α counted; DetA = TP / (TP + FN + FP), AssA = the mean over TPs of each pair's association Jaccard
//     TPA / (TPA + FNA + FPA); HOTA_α = sqrt(DetA · AssA); HOTA, DetA, AssA, LocA are means over α.
// Files: MOT Challenge text, one box per line "frame, id, left, top, width, height, conf, …" (frames from 1); for
// ground truth, lines with conf (the "consider" flag) 0 are skipped, as for MOT17 pedestrians.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace vision::track {

struct MotBox {
  int64_t frame = 0;  // 1-based
  int64_t id = 0;
  std::array<double, 4> xyxy = {};
};

struct MotMetrics {
  // CLEAR
  int64_t tp = 0, fn = 0, fp = 0, idsw = 0, gt_dets = 0, tracker_dets = 0, gt_ids = 0, tracker_ids = 0;
  double mota = 0, motp = 0;
  // Identity
  int64_t idtp = 0, idfn = 0, idfp = 0;
  double idf1 = 0, idp = 0, idr = 0;
  // HOTA (means over α), and HOTA at each α
  double hota = 0, deta = 0, assa = 0, loca = 0;
  std::array<double, 19> hota_alpha = {};
};

// Metrics of `tracker` against `gt` over all frames (either list in any order). Throws vision::Error for a frame < 1,
// a box of non-positive size, a non-finite value, or an id used twice in one frame.
MotMetrics evaluate_mot(const std::vector<MotBox>& gt, const std::vector<MotBox>& tracker);

// Reads a MOT Challenge text file. Throws vision::Error naming the file and line of a malformed one.
std::vector<MotBox> read_mot_file(const std::filesystem::path& path, bool ground_truth);

}  // namespace vision::track
