#pragma once
// The study's models for `neuromkl predict` (docs/predict.md): the final model of every learner and
// each outer fold's model, written to model/ in the output folder.
#include <string>
#include <vector>

#include "neuromkl/cv/nested_cv.hpp"
#include "neuromkl/export/model.hpp"
#include "neuromkl/export/run_record.hpp"
#include "neuromkl/pipeline/study_context.hpp"

namespace neuromkl::pipeline {

/// The final model of every learner: its parameters chosen by the study's inner CV scheme run over
/// every labelled subject (the same grid, criterion and tie rule as in each outer fold, seed
/// DeriveSeed(cv.seed, "FINAL")), then refitted on all labelled subjects. One OuterFoldResult per learner
/// (index -1, no test subjects); a failed refit has its `error` set.
std::vector<cv::OuterFoldResult> FitFinalModels(const StudyContext& ctx);

/// Writes <dir>/model/: model.json (the index), and per learner <Learner>/ (the final model) and
/// <Learner>/folds/<k>/ (outer fold k's model). Image arrays come from one pass over the training images.
/// Sets each learner's record.finalModel.
/// XXH3-128 of one subject's image files, over `imageLists` in order (each: one image source's image per row): the
/// card's training.image_xxh3, and what predict compares a new subject with.
std::string SubjectImageHash(const std::vector<const std::vector<std::string>*>& imageLists, std::size_t row);
void ExportModels(const StudyContext& ctx, exporting::RunRecord& record, const std::vector<cv::OuterFoldResult>& finals, const std::string& dir);

/// One exported model from a fitted fold: the card, coefficients, covariates and kernel-space sources (the image and
/// connectivity arrays, which need a pass over the images or matrices, and the precomputed kernels' training blocks,
/// read from their files, are added by ExportModels).
exporting::ExportedModel DescribeModel(const StudyContext& ctx, const exporting::RunRecord& record, const exporting::LearnerRecord& learner,
                                       const cv::OuterFoldResult& fold, bool final);

}  // namespace neuromkl::pipeline
