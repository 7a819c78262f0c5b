//! Files: `POST /v1/file/read`, `/write`, `/list`, `/str_replace_editor`, `/upload` and
//! `GET /v1/file/download`.

use reqwest::Method;
use reqwest::multipart::{Form, Part};

use super::{SandboxClient, read_body};
use crate::error::ClientError;
use crate::types::{
    FileDownloadQuery, FileListRequest, FileListResult, FileReadRequest, FileReadResult,
    FileUploadResult, FileWriteRequest, FileWriteResult, StrReplaceEditorRequest,
    StrReplaceEditorResult,
};

impl SandboxClient {
    /// Reads a text file (or its bytes, base64-encoded, with `encoding: base64`).
    pub async fn file_read(
        &self,
        request: &FileReadRequest,
    ) -> Result<FileReadResult, ClientError> {
        self.post_json("file read", "/v1/file/read", request).await
    }

    /// Writes (or appends to) a file.
    pub async fn file_write(
        &self,
        request: &FileWriteRequest,
    ) -> Result<FileWriteResult, ClientError> {
        self.post_json("file write", "/v1/file/write", request)
            .await
    }

    /// Lists a directory.
    pub async fn file_list(
        &self,
        request: &FileListRequest,
    ) -> Result<FileListResult, ClientError> {
        self.post_json("file list", "/v1/file/list", request).await
    }

    /// Anthropic's text editor tool: view, create, str_replace, insert, undo_edit.
    pub async fn str_replace_editor(
        &self,
        request: &StrReplaceEditorRequest,
    ) -> Result<StrReplaceEditorResult, ClientError> {
        self.post_json("str_replace_editor", "/v1/file/str_replace_editor", request)
            .await
    }

    /// A file's bytes (at most [`ClientConfig::max_body_bytes`](super::ClientConfig)).
    pub async fn file_download(&self, path: &str) -> Result<Vec<u8>, ClientError> {
        self.file_download_at_most(path, u64::MAX).await
    }

    /// A file's bytes, refused with [`ClientError::TooLarge`] past `limit` bytes (or
    /// [`ClientConfig::max_body_bytes`](super::ClientConfig), if lower) however large a listing
    /// said it was: the file may have grown since, and what sandboxd sends is what counts. At
    /// most `limit` bytes are ever held.
    pub async fn file_download_at_most(
        &self,
        path: &str,
        limit: u64,
    ) -> Result<Vec<u8>, ClientError> {
        const OPERATION: &str = "file download";
        let query = FileDownloadQuery {
            path: path.to_string(),
        };
        let request = self.request(Method::GET, "/v1/file/download").query(&query);
        let response = self.send(OPERATION, request).await?;
        read_body(OPERATION, response, limit.min(self.max_body_bytes)).await
    }

    /// Uploads `content` as a file named `file_name`, to `path` (a file, or a directory to put
    /// it in) or, without one, to the workspace.
    pub async fn file_upload(
        &self,
        path: Option<&str>,
        file_name: &str,
        content: Vec<u8>,
    ) -> Result<FileUploadResult, ClientError> {
        let mut form = Form::new();
        // sandboxd needs `path` before the file part.
        if let Some(path) = path {
            form = form.text("path", path.to_string());
        }
        form = form.part(
            "file",
            Part::bytes(content).file_name(file_name.to_string()),
        );
        let request = self
            .request(Method::POST, "/v1/file/upload")
            .multipart(form);
        self.envelope("file upload", request).await
    }
}
