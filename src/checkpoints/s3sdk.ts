// The parts of the AWS SDK's S3 client s3.ts uses, in a module of their own so that s3.ts loads it
// on the store's first operation, by import(), rather than with the daemon. A plain ESM re-export:
// the bundler gives the importer named exports of this CommonJS package as Node does.
export { DeleteObjectCommand, GetObjectCommand, HeadObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
