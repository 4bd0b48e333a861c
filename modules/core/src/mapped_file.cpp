#include "neuromkl/core/mapped_file.hpp"

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <utility>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "neuromkl/core/errors.hpp"

namespace neuromkl {

namespace {
std::string Reason() { return std::strerror(errno); }

unsigned char* Map(int fd, std::uint64_t bytes, bool writable, bool prefetch, const std::string& path) {
  if (bytes == 0) return nullptr;
  const int protection = writable ? PROT_READ | PROT_WRITE : PROT_READ;
  void* data = mmap(nullptr, static_cast<std::size_t>(bytes), protection, MAP_SHARED | (prefetch ? MAP_POPULATE : 0), fd, 0);
  if (data == MAP_FAILED) {
    const std::string why = Reason();
    close(fd);
    throw IoError("store:Map", path, "cannot map the file into memory: " + why);
  }
  return static_cast<unsigned char*>(data);
}
}  // namespace

std::shared_ptr<MappedFile> MappedFile::OpenReadOnly(const std::string& path, bool prefetch) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError("store:Map", path, "cannot open the file: " + Reason());
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const std::string why = Reason();
    close(fd);
    throw IoError("store:Map", path, "cannot read the file's size: " + why);
  }
  const auto bytes = static_cast<std::uint64_t>(st.st_size);
  unsigned char* data = Map(fd, bytes, false, prefetch, path);
  return std::shared_ptr<MappedFile>(new MappedFile(path, fd, data, bytes, false));
}

std::shared_ptr<MappedFile> MappedFile::Create(const std::string& path, std::uint64_t bytes) {
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError("store:Map", path, "cannot create the file: " + Reason());
  if (bytes > 0) {
    const int status = posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (status != 0) {
      close(fd);
      unlink(path.c_str());
      throw IoError(status == ENOSPC ? "store:NoSpace" : "store:Write", path,
                    "cannot reserve " + std::to_string(bytes) + " bytes on the disk for the file: " + std::strerror(status));
    }
  }
  unsigned char* data = Map(fd, bytes, true, false, path);
  return std::shared_ptr<MappedFile>(new MappedFile(path, fd, data, bytes, true));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) munmap(data_, static_cast<std::size_t>(size_));
  if (fd_ >= 0) close(fd_);
}

unsigned char* MappedFile::MutableData() {
  if (!writable_) throw std::logic_error("MappedFile: " + path_ + " is mapped read-only");
  return data_;
}

void MappedFile::Flush() const {
  if (data_ == nullptr || !writable_) return;
  if (msync(data_, static_cast<std::size_t>(size_), MS_SYNC) != 0) throw IoError("store:Write", path_, "cannot write the mapped values to the file: " + Reason());
}

void MappedFile::Truncate(std::uint64_t bytes) {
  if (!writable_) throw std::logic_error("MappedFile: " + path_ + " is mapped read-only");
  if (bytes > size_) throw std::logic_error("MappedFile::Truncate: " + std::to_string(bytes) + " bytes is more than the file's " + std::to_string(size_));
  if (bytes == size_) return;
  Flush();
  if (data_ != nullptr) munmap(data_, static_cast<std::size_t>(size_));
  data_ = nullptr;
  size_ = 0;
  if (ftruncate(fd_, static_cast<off_t>(bytes)) != 0) throw IoError("store:Write", path_, "cannot shorten the file: " + Reason());
  const int fd = dup(fd_);  // Map closes its descriptor on failure; ours stays for the destructor
  if (fd < 0) throw IoError("store:Map", path_, "cannot map the file again: " + Reason());
  data_ = Map(fd, bytes, true, false, path_);
  close(fd);
  size_ = bytes;
}

}  // namespace neuromkl
